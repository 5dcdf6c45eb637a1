#include "core/huge_buffer.h"

#include <new>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace sieve {
namespace {

constexpr std::align_val_t kFallbackAlign{64};

}  // namespace

HugeBuffer::HugeBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
#if defined(__linux__)
  // Small buffers stay on ordinary pages: a huge page each would waste most of it.
  if (bytes >= kHugePage / 2) {
    // Over-map by one huge page so that the start can be aligned to it; the slack stays mapped
    // (untouched, so never committed) and is unmapped with the rest.
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    const size_t len = rounded + kHugePage;
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
      base_ = p;
      mapped_ = len;
      const auto addr = reinterpret_cast<uintptr_t>(p);
      const uintptr_t aligned = (addr + kHugePage - 1) / kHugePage * kHugePage;
      data_ = reinterpret_cast<std::byte*>(aligned);
      advised_ = madvise(data_, rounded, MADV_HUGEPAGE) == 0;
      return;
    }
  }
#endif
  data_ = static_cast<std::byte*>(::operator new[](bytes, kFallbackAlign, std::nothrow));
}

HugeBuffer::HugeBuffer(HugeBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      mapped_(std::exchange(o.mapped_, 0)),
      base_(std::exchange(o.base_, nullptr)),
      advised_(std::exchange(o.advised_, false)) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    mapped_ = std::exchange(o.mapped_, 0);
    base_ = std::exchange(o.base_, nullptr);
    advised_ = std::exchange(o.advised_, false);
  }
  return *this;
}

HugeBuffer::~HugeBuffer() {
  release();
}

void HugeBuffer::release() {
  if (data_ == nullptr) return;
#if defined(__linux__)
  if (mapped_ > 0) {
    munmap(base_, mapped_);
    data_ = nullptr;
    return;
  }
#endif
  ::operator delete[](data_, kFallbackAlign);
  data_ = nullptr;
}

}  // namespace sieve
