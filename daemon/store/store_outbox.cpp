// The outbox: what a daemon that pushes to a central one (docs/scale.md) has still to hand over.
// put_failures and put_run queue their records in the same transaction that stores them
// (StoreOptions::outbox), so a record the daemon acknowledged is either pushed or still queued,
// whatever dies in between; the pusher (daemon/server/pusher.cpp) peeks, sends, and removes what
// the receiver acknowledged.
#include "gpuemu/store/store.hpp"

#include "store_impl.hpp"

#include <set>

namespace gpuemu {

using store_codec::dump_json;
using store_codec::parse_stored_json;

namespace {

Result<OutboxItem> outbox_item(std::string_view key, std::string_view value, const std::string& dir) {
  auto k = store_codec::parse_outbox_key(key);
  if (!k) return make_error(ErrorCode::io_error, "store corrupted: malformed outbox key in " + dir);
  GPUEMU_TRY(Json v, parse_stored_json(value, "an outbox entry in " + dir));
  OutboxItem item;
  item.key = std::string(key);
  item.kind = k->kind;
  item.id = std::string(k->id);
  item.queued_ms = k->queued_ms;
  item.started_ms = v.value("started_ms", std::int64_t{0});
  item.rejected = v.value("rejected", "");
  return item;
}

// Entries in key order (oldest first) that `keep` accepts, at most `max` (0: all).
// (ImplT is Store::Impl, a private type: deduced, not named.)
template <class ImplT, class Keep>
Result<std::vector<OutboxItem>> scan(const ImplT& impl, std::size_t max, Keep keep) {
  return impl.read([&](const lmdb::Txn& txn) -> Result<std::vector<OutboxItem>> {
    std::vector<OutboxItem> out;
    GPUEMU_TRY(lmdb::Cursor cursor, txn.cursor(impl.outbox));
    GPUEMU_TRY(bool at, cursor.move(MDB_FIRST));
    for (; at && (max == 0 || out.size() < max);) {
      GPUEMU_TRY(OutboxItem item, outbox_item(cursor.key(), cursor.value(), impl.dir));
      if (keep(item)) out.push_back(std::move(item));
      GPUEMU_TRY(at, cursor.move(MDB_NEXT));
    }
    return out;
  });
}

}  // namespace

Result<std::vector<OutboxItem>> Store::outbox_peek(std::size_t max) const {
  return Impl::guard([&] {
    return scan(*m_impl, max, [](const OutboxItem& i) { return i.rejected.empty(); });
  });
}

Result<std::vector<OutboxItem>> Store::outbox_rejected(std::size_t max) const {
  return Impl::guard([&] {
    return scan(*m_impl, max, [](const OutboxItem& i) { return !i.rejected.empty(); });
  });
}

Status Store::outbox_done(const std::vector<std::string>& keys) {
  Impl& impl = *m_impl;
  return impl.write([&](lmdb::Txn& txn) -> Status {
    for (const auto& k : keys) GPUEMU_TRY_STATUS(txn.del(impl.outbox, k));
    return {};
  });
}

Status Store::outbox_reject(const std::string& key, const std::string& why) {
  Impl& impl = *m_impl;
  return impl.write([&](lmdb::Txn& txn) -> Status {
    GPUEMU_TRY(auto held, txn.get(impl.outbox, key));
    if (!held) return {};  // gone meanwhile
    GPUEMU_TRY(Json v, parse_stored_json(*held, "an outbox entry in " + impl.dir));
    v["rejected"] = why;
    v["rejected_ms"] = store_codec::now_ms();
    GPUEMU_TRY_STATUS(txn.put(impl.outbox, key, dump_json(v)));
    return {};
  });
}

Result<std::size_t> Store::outbox_retry_rejected() {
  Impl& impl = *m_impl;
  GPUEMU_TRY(auto rejected, outbox_rejected(0));
  return impl.write([&](lmdb::Txn& txn) -> Result<std::size_t> {
    for (const auto& item : rejected) {
      Json v = Json::object();
      if (item.kind == 'r') v["started_ms"] = item.started_ms;
      GPUEMU_TRY_STATUS(txn.put(impl.outbox, item.key, dump_json(v)));
    }
    return rejected.size();
  });
}

Result<OutboxStats> Store::outbox_stats() const {
  return Impl::guard([&]() -> Result<OutboxStats> {
    GPUEMU_TRY(auto all, scan(*m_impl, 0, [](const OutboxItem&) { return true; }));
    OutboxStats s;
    for (const auto& i : all) {
      if (!i.rejected.empty()) {
        ++s.rejected;
        continue;
      }
      if (s.pending++ == 0) s.oldest_ms = i.queued_ms;
    }
    return s;
  });
}

Result<std::size_t> Store::outbox_enqueue_stored(const FailureQuery& query, bool runs) {
  Impl& impl = *m_impl;
  return Impl::guard([&]() -> Result<std::size_t> {
    GPUEMU_TRY(auto queued, scan(impl, 0, [](const OutboxItem&) { return true; }));
    std::set<std::string> have;
    for (const auto& i : queued) have.insert(std::string(1, i.kind) + i.id);
    GPUEMU_TRY(auto failures, list_failures(query));
    std::vector<std::pair<std::string, std::string>> fresh;  // key, value
    const std::int64_t now = store_codec::now_ms();
    // Oldest first, so that the queue keeps the order they were stored in.
    for (auto it = failures.rbegin(); it != failures.rend(); ++it)
      if (have.insert("f" + it->id).second)
        fresh.emplace_back(store_codec::outbox_key(now, 'f', it->id), "{}");
    if (runs) {
      GPUEMU_TRY(auto all, list_runs(0));
      for (auto it = all.rbegin(); it != all.rend(); ++it) {
        const std::string id = it->value("id", "");
        if (id.empty() || !have.insert("r" + id).second) continue;
        if (query.since_ms > 0 && it->value("started_ms", std::int64_t{0}) < query.since_ms) continue;
        if (!query.op.empty() && it->value("op", "") != query.op) continue;
        fresh.emplace_back(store_codec::outbox_key(now, 'r', id),
                           dump_json(Json{{"started_ms", it->value("started_ms", std::int64_t{0})}}));
      }
    }
    Status written = impl.write([&](lmdb::Txn& txn) -> Status {
      for (const auto& [k, v] : fresh) GPUEMU_TRY_STATUS(txn.put(impl.outbox, k, v));
      return {};
    });
    if (!written) return written.error();
    return fresh.size();
  });
}

}  // namespace gpuemu
