// A vector with inline storage for N elements: no heap allocation until it grows past N. Used on
// the dispatch hot path (Note [Dispatch hot path] in dispatcher.h) for sizes and call arguments.
#pragma once
#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "tessera/array_ref.h"

namespace tessera::detail {

template <typename T, size_t N>
class SmallVector {
 public:
  SmallVector() = default;
  SmallVector(std::initializer_list<T> il) {
    for (const T& v : il) push_back(v);
  }
  SmallVector(const T* first, const T* last) {
    for (; first != last; ++first) push_back(*first);
  }
  explicit SmallVector(ArrayRef<T> a) : SmallVector(a.begin(), a.end()) {}
  SmallVector(size_t n, const T& value) {
    for (size_t i = 0; i < n; ++i) push_back(value);
  }
  SmallVector(const SmallVector& o) {
    for (const T& v : o) push_back(v);
  }
  SmallVector(SmallVector&& o) noexcept {
    for (T& v : o) push_back(std::move(v));
  }
  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) {
      clear();
      for (const T& v : o) push_back(v);
    }
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) {
      clear();
      for (T& v : o) push_back(std::move(v));
    }
    return *this;
  }
  ~SmallVector() {
    clear();
    if (data_ != inline_ptr()) ::operator delete(data_);
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& back() { return data_[size_ - 1]; }
  operator ArrayRef<T>() const { return ArrayRef<T>(data_, size_); }  // NOLINT
  ArrayRef<T> ref() const { return ArrayRef<T>(data_, size_); }

  void push_back(const T& v) {
    if (size_ == capacity_) grow();
    new (data_ + size_) T(v);
    ++size_;
  }
  void push_back(T&& v) {
    if (size_ == capacity_) grow();
    new (data_ + size_) T(std::move(v));
    ++size_;
  }
  template <typename... A>
  T& emplace_back(A&&... a) {
    if (size_ == capacity_) grow();
    new (data_ + size_) T(std::forward<A>(a)...);
    return data_[size_++];
  }
  void insert(size_t index, const T& v) {
    push_back(v);
    for (size_t i = size_ - 1; i > index; --i) std::swap(data_[i], data_[i - 1]);
  }
  void erase(size_t index) {
    for (size_t i = index; i + 1 < size_; ++i) data_[i] = std::move(data_[i + 1]);
    pop_back();
  }
  void pop_back() {
    --size_;
    data_[size_].~T();
  }
  void clear() {
    while (size_) pop_back();
  }
  void resize(size_t n, const T& value = T()) {
    while (size_ > n) pop_back();
    while (size_ < n) push_back(value);
  }

 private:
  T* inline_ptr() { return reinterpret_cast<T*>(inline_); }
  void grow() {
    size_t cap = capacity_ * 2;
    T* p = static_cast<T*>(::operator new(cap * sizeof(T)));
    for (size_t i = 0; i < size_; ++i) {
      new (p + i) T(std::move(data_[i]));
      data_[i].~T();
    }
    if (data_ != inline_ptr()) ::operator delete(data_);
    data_ = p;
    capacity_ = cap;
  }

  alignas(T) unsigned char inline_[N * sizeof(T)];
  T* data_ = reinterpret_cast<T*>(inline_);
  size_t size_ = 0;
  size_t capacity_ = N;
};

}  // namespace tessera::detail
