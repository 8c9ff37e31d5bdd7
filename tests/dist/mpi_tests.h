/* The dist tests that run as MPI ranks, by file (see mpi_harness.h). */
#ifndef MX_TESTS_DIST_MPI_TESTS_H
#define MX_TESTS_DIST_MPI_TESTS_H

#include "mpi_harness.h"

extern const mpi_test collective_tests[];
extern const int n_collective_tests;
extern const mpi_test ddp_tests[];
extern const int n_ddp_tests;
extern const mpi_test async_tests[];
extern const int n_async_tests;
extern const mpi_test fold_tests[];
extern const int n_fold_tests;

#endif
