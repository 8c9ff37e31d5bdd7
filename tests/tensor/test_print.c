/* placeholder: filled by the suite */
#include <criterion/criterion.h>
