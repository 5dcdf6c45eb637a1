#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  std::fprintf(stderr, "sieve: skeleton\n");
  return 0;
}
