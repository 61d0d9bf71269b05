// A minimal intrusive refcounted pointer: copying a handle is one atomic increment.
#pragma once
#include <atomic>
#include <cstdint>
#include <utility>

namespace tessera {

class RefCounted {
 public:
  RefCounted() = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;
  virtual ~RefCounted() = default;
  void retain() const noexcept { refcount_.fetch_add(1, std::memory_order_relaxed); }
  void release() const noexcept {
    if (refcount_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  int64_t use_count() const noexcept { return refcount_.load(std::memory_order_relaxed); }

 private:
  mutable std::atomic<int64_t> refcount_{0};
};

template <typename T>
class IntrusivePtr {
 public:
  IntrusivePtr() = default;
  explicit IntrusivePtr(T* p) : p_(p) {
    if (p_) p_->retain();
  }
  IntrusivePtr(const IntrusivePtr& o) : p_(o.p_) {
    if (p_) p_->retain();
  }
  IntrusivePtr(IntrusivePtr&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  IntrusivePtr& operator=(const IntrusivePtr& o) {
    IntrusivePtr(o).swap(*this);
    return *this;
  }
  IntrusivePtr& operator=(IntrusivePtr&& o) noexcept {
    IntrusivePtr(std::move(o)).swap(*this);
    return *this;
  }
  ~IntrusivePtr() {
    if (p_) p_->release();
  }
  T* get() const { return p_; }
  T* operator->() const { return p_; }
  T& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }
  void swap(IntrusivePtr& o) noexcept { std::swap(p_, o.p_); }
  int64_t use_count() const { return p_ ? p_->use_count() : 0; }

 private:
  T* p_ = nullptr;
};

template <typename T, typename... Args>
IntrusivePtr<T> make_intrusive(Args&&... args) {
  return IntrusivePtr<T>(new T(std::forward<Args>(args)...));
}

}  // namespace tessera
