// A minimal intrusive refcounted pointer: copying a handle is one atomic increment.
#pragma once
#include <atomic>
#include <cstdint>
#include <utility>

namespace tessera {

template <typename T>
class IntrusivePtr;
template <typename T, typename... Args>
IntrusivePtr<T> make_intrusive(Args&&... args);

// Note [Refcount fast paths]
// A new object's first reference is stored, not added, and dropping the last reference deletes
// without the atomic decrement: a sole owner has no other handle anyone could copy from, so
// nothing can race the count (PyTorch's intrusive_ptr does the same). Each operator output saves
// two locked instructions per object this way (docs/performance.md, dispatch overhead).
class RefCounted {
 public:
  RefCounted() = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;
  virtual ~RefCounted() = default;
  void retain() const noexcept { refcount_.fetch_add(1, std::memory_order_relaxed); }
  void release() const noexcept {
    if (refcount_.load(std::memory_order_acquire) == 1 || refcount_.fetch_sub(1, std::memory_order_acq_rel) == 1)
      delete this;
  }
  int64_t use_count() const noexcept { return refcount_.load(std::memory_order_relaxed); }

 private:
  template <typename T, typename... Args>
  friend IntrusivePtr<T> make_intrusive(Args&&... args);
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
  struct Adopt {};
  IntrusivePtr(T* p, Adopt) noexcept : p_(p) {}
  template <typename U, typename... Args>
  friend IntrusivePtr<U> make_intrusive(Args&&... args);
  T* p_ = nullptr;
};

template <typename T, typename... Args>
IntrusivePtr<T> make_intrusive(Args&&... args) {
  T* p = new T(std::forward<Args>(args)...);
  p->refcount_.store(1, std::memory_order_relaxed);  // Note [Refcount fast paths]
  return IntrusivePtr<T>(p, typename IntrusivePtr<T>::Adopt{});
}

}  // namespace tessera
