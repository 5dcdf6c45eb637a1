// Large uninitialised memory backed by transparent huge pages where the kernel allows them.
//
// Used for the kept-row copies of a sequence (SparseSeq::kept_storage): tens of MB written at
// one decode step, where small pages cost a fault per 4 KiB. The memory is mmap'ed anonymous
// (the kernel zeroes it on first touch; nothing else writes it), 2 MiB-aligned, and advised
// MADV_HUGEPAGE, which is all the kernel's "madvise" THP mode needs. Buffers under 1 MiB, and
// systems without mmap, get aligned operator new instead. (The KV arenas do not use it: on the
// device's Xeon dense decode measured slower with them on huge pages, bench/RESULTS.md.)
#pragma once

#include <cstddef>
#include <cstdint>

namespace sieve {

class HugeBuffer {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  HugeBuffer() = default;
  // bytes == 0 gives an empty buffer; a failed allocation too (check data()).
  explicit HugeBuffer(size_t bytes);
  HugeBuffer(HugeBuffer&& o) noexcept;
  HugeBuffer& operator=(HugeBuffer&& o) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer();

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return data_ == nullptr; }
  // Whether the memory came from mmap with the huge-page advice accepted.
  bool advised() const { return advised_; }

 private:
  void release();
  std::byte* data_ = nullptr;
  size_t size_ = 0;    // bytes asked for
  size_t mapped_ = 0;  // bytes mapped (0: operator new)
  void* base_ = nullptr;
  bool advised_ = false;
};

}  // namespace sieve
