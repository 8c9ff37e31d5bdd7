/* placeholder: filled by the tensor suite */
