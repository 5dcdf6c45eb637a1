// SIEVE_ASSERT: invariants of the engine itself (never user input). Prints file:line and aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

#define SIEVE_ASSERT(cond)                                                                        \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      std::fprintf(stderr, "sieve: internal invariant failed at %s:%d: %s\n", __FILE__, __LINE__, \
                   #cond);                                                                        \
      std::abort();                                                                               \
    }                                                                                             \
  } while (0)
