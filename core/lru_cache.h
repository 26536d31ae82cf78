// A cache of at most `capacity` entries that forgets the least recently used one to make room:
// the cuDNN convolution plans (one per shape) live in one, so that a run whose shapes keep
// changing (a last batch of another size, images of many sizes) does not grow it without end.
// Entries are shared: one evicted while a caller still holds it lives until that caller lets
// go. Lookups compare keys with ==, from the most recently used: the shapes a training step
// uses over and over are found first.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <utility>

#include "core/error.h"

namespace pac {

template <class Key, class Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {
    PAC_CHECK(capacity > 0, "LruCache: capacity must be at least 1");
  }

  // The entry for `key`, made by `make()` if there is none (and then the least recently used
  // entry is dropped if the cache was full). Safe to call from several threads.
  std::shared_ptr<Value> get(const Key& key, const std::function<std::unique_ptr<Value>()>& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->first == key) {
        entries_.splice(entries_.begin(), entries_, it);
        return entries_.front().second;
      }
    }
    std::shared_ptr<Value> value(make());
    entries_.emplace_front(key, value);
    if (entries_.size() > capacity_) {
      entries_.pop_back();
      ++evictions_;
    }
    return value;
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }
  size_t evictions() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return evictions_;
  }

 private:
  size_t capacity_;
  mutable std::mutex mutex_;
  std::list<std::pair<Key, std::shared_ptr<Value>>> entries_;  // the most recently used first
  size_t evictions_ = 0;
};

}  // namespace pac
