#include "case_cache.hpp"

#include "gpuemu/engine/verdict.hpp"

#include <exception>

namespace gpuemu::server {
namespace {

std::size_t input_bytes(const TestCase& c) {
  std::size_t n = 0;
  for (const auto& [name, t] : c.inputs) n += t.storage_bytes();
  return n;
}

std::size_t prepared_bytes(const CaseCache::Prepared& p) {
  std::size_t n = 0;
  for (const auto& [name, a] : p.ctx.inputs) n += a.data.size() * sizeof(double);
  for (const auto& r : p.reference)
    n += (r.value.size() + r.c_acc.size() + r.c_in.size()) * sizeof(double) + r.alt_nonfinite.size();
  for (const auto& r : p.rounded) n += r.size() * sizeof(double);
  return n;
}

}  // namespace

CaseCache::CaseCache(std::size_t limit_bytes, bool background) : m_limit(limit_bytes) {
  if (background && m_limit > 0) m_thread = std::thread([this] { worker(); });
}

CaseCache::~CaseCache() {
  {
    std::lock_guard lock(m_mu);
    m_stop = true;
  }
  m_cv.notify_all();
  if (m_thread.joinable()) m_thread.join();
}

std::string CaseCache::key(const std::string& op, const std::string& options_json,
                           std::uint64_t master_seed, std::int64_t index) {
  std::string k = op;
  k += '\n';
  k += options_json;
  k += '\n';
  k += std::to_string(master_seed);
  k += ':';
  k += std::to_string(index);
  return k;
}

void CaseCache::put(const std::string& key, const TestCase& c,
                    std::shared_ptr<const Catalogue> catalogue, const OpSchema* schema) {
  if (m_limit == 0) return;
  auto e = std::make_shared<Entry>();
  e->m_case = c;
  e->m_catalogue = std::move(catalogue);
  e->m_schema = schema;
  e->m_bytes = input_bytes(c);
  {
    std::lock_guard lock(m_mu);
    if (auto it = m_map.find(key); it != m_map.end()) {  // the same case fetched again: keep it
      m_lru.splice(m_lru.begin(), m_lru, it->second.lru);
      it->second.entry->m_used = std::chrono::steady_clock::now();
      return;
    }
    m_lru.push_front(key);
    m_map.emplace(key, Slot{e, m_lru.begin()});
    e->m_kept = true;
    e->m_used = std::chrono::steady_clock::now();
    m_bytes += e->m_bytes;
    evict_locked();
    if (m_thread.joinable())
      m_queue.push_back([this, w = std::weak_ptr<Entry>(e)] {
        if (auto kept = w.lock()) (void)prepared(*kept);
      });
  }
  m_cv.notify_one();
}

std::shared_ptr<CaseCache::Entry> CaseCache::find(const std::string& key) {
  std::lock_guard lock(m_mu);
  auto it = m_map.find(key);
  if (it == m_map.end()) {
    ++m_misses;
    return nullptr;
  }
  ++m_hits;
  m_lru.splice(m_lru.begin(), m_lru, it->second.lru);
  it->second.entry->m_used = std::chrono::steady_clock::now();
  return it->second.entry;
}

std::shared_ptr<CaseCache::Entry> CaseCache::peek(const std::string& key) const {
  std::lock_guard lock(m_mu);
  auto it = m_map.find(key);
  return it == m_map.end() ? nullptr : it->second.entry;
}

void CaseCache::post(std::function<void()> job) {
  if (!m_thread.joinable()) return;
  {
    std::lock_guard lock(m_mu);
    m_queue.push_back(std::move(job));
  }
  m_cv.notify_one();
}

std::size_t CaseCache::drop_unused(std::chrono::steady_clock::duration age) {
  const auto cutoff = std::chrono::steady_clock::now() - age;
  std::lock_guard lock(m_mu);
  std::size_t dropped = 0;
  // The least recently used are at the back; the first one used since the cutoff ends the walk.
  while (!m_lru.empty()) {
    auto it = m_map.find(m_lru.back());
    if (it->second.entry->m_used > cutoff) break;
    m_bytes -= it->second.entry->m_bytes;
    it->second.entry->m_kept = false;
    m_map.erase(it);
    m_lru.pop_back();
    ++dropped;
  }
  return dropped;
}

void CaseCache::erase(const std::string& key) {
  std::lock_guard lock(m_mu);
  auto it = m_map.find(key);
  if (it == m_map.end()) return;
  m_bytes -= it->second.entry->m_bytes;
  it->second.entry->m_kept = false;
  m_lru.erase(it->second.lru);
  m_map.erase(it);
}

const Result<CaseCache::Prepared>& CaseCache::prepared(Entry& e) {
  std::lock_guard entry_lock(e.m_mu);
  if (e.m_prepared) return *e.m_prepared;
  e.m_prepared = [&]() -> Result<Prepared> {
    try {
      Prepared p;
      GPUEMU_TRY(p.ctx, case_ref_context(*e.m_schema, e.m_case));
      GPUEMU_TRY(p.reference, run_reference(*e.m_schema, p.ctx));
      p.rounded = rounded_reference(p.reference);
      return p;
    } catch (const std::exception& ex) {  // as the handlers' own call would report it
      return make_error(ErrorCode::internal, std::string("reference: ") + ex.what());
    }
  }();
  const std::size_t more = *e.m_prepared ? prepared_bytes(**e.m_prepared) : 0;
  std::lock_guard lock(m_mu);
  // Counted only while the entry is still kept (an evicted one is freed with its last user).
  if (e.m_kept) {
    e.m_bytes += more;
    m_bytes += more;
    evict_locked();
  }
  return *e.m_prepared;
}

void CaseCache::evict_locked() {
  // Least recently used out first; the newest entry stays even alone over the limit (the case being
  // handed out now is the one about to be submitted).
  while (m_bytes > m_limit && m_lru.size() > 1) {
    const std::string& oldest = m_lru.back();
    auto it = m_map.find(oldest);
    m_bytes -= it->second.entry->m_bytes;
    it->second.entry->m_kept = false;
    m_map.erase(it);
    m_lru.pop_back();
  }
}

void CaseCache::worker() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(m_mu);
      m_cv.wait(lock, [&] { return m_stop || !m_queue.empty(); });
      if (m_stop) return;
      job = std::move(m_queue.front());
      m_queue.pop_front();
    }
    try {
      job();
    } catch (const std::exception&) {  // a job's failure is found again by whoever needs its result
    }
  }
}

std::size_t CaseCache::bytes() const {
  std::lock_guard lock(m_mu);
  return m_bytes;
}

std::size_t CaseCache::size() const {
  std::lock_guard lock(m_mu);
  return m_map.size();
}

std::int64_t CaseCache::hits() const {
  std::lock_guard lock(m_mu);
  return m_hits;
}

std::int64_t CaseCache::misses() const {
  std::lock_guard lock(m_mu);
  return m_misses;
}

}  // namespace gpuemu::server
