// read_text_file: bounded, regular files only, errors without the file's contents.
#include "core/text_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace sieve {
namespace {

TEST(TextFile, ReadsARegularFile) {
  const std::string path = ::testing::TempDir() + "/text_file_ok.txt";
  {
    std::ofstream f(path, std::ios::binary);
    f << "hello\nworld";
  }
  auto r = read_text_file(path, "test file");
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(*r, "hello\nworld");
  std::remove(path.c_str());
}

TEST(TextFile, RefusesDevicesFifosDirectoriesAndLargeFiles) {
  // /dev/zero never ends: refused before a byte is read
  auto z = read_text_file("/dev/zero", "test file");
  ASSERT_FALSE(z);
  EXPECT_NE(z.message().find("not a regular file"), std::string::npos) << z.message();
  // a FIFO without a writer would block an open() forever
  const std::string fifo = ::testing::TempDir() + "/text_file_fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = read_text_file(fifo, "test file");
  ASSERT_FALSE(f);
  EXPECT_NE(f.message().find("not a regular file"), std::string::npos) << f.message();
  std::remove(fifo.c_str());
  auto d = read_text_file(::testing::TempDir(), "test file");
  ASSERT_FALSE(d);
  EXPECT_NE(d.message().find("directory"), std::string::npos) << d.message();
  // over the bound: refused, and the message does not quote the contents
  const std::string big = ::testing::TempDir() + "/text_file_big.txt";
  {
    std::ofstream o(big, std::ios::binary);
    o << "SECRET-" << std::string(100, 'x');
  }
  auto b = read_text_file(big, "test file", 64);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.message().find("SECRET"), std::string::npos) << b.message();
  EXPECT_NE(b.message().find("more than"), std::string::npos) << b.message();
  std::remove(big.c_str());
  auto missing = read_text_file("/nonexistent/x.json", "test file");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.message().find("/nonexistent/x.json"), std::string::npos);
}

}  // namespace
}  // namespace sieve
