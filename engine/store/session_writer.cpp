// SessionWriter: a queue in front of one writer thread that owns the SQLite connection and
// commits whatever is queued in batched transactions.

#include "schema.h"
#include "session_file.h"
#include "session_store.h"
#include "sqlite_util.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <string_view>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <variant>
#include <vector>

namespace meshbench::store {

namespace {

// A transaction takes what is queued until about this many records, or what arrives within
// kTransactionWindow of its start: large enough that the commit's cost vanishes per record, short
// enough that readers (the GUI) see new data promptly.
constexpr std::size_t kRecordsPerTransaction = 10000;
constexpr auto kTransactionWindow = std::chrono::milliseconds(50);

struct KernelNames {
    std::vector<std::string> names;
};
struct RankKernels {
    std::uint32_t rank = 0;
    std::vector<KernelRow> kernels;
};
struct DeviceTime {
    std::vector<DeviceTimeRow> rows;
};
using Item = std::variant<wire::Batch, RankInfo, RankTraffic, SessionOutcome, ImportSource, KernelNames, RankKernels,
                          DeviceTime>;

std::size_t recordCount(const Item& item)
{
    if (const auto* batch = std::get_if<wire::Batch>(&item))
        return std::max<std::size_t>(batch->records.size(), 1);
    if (const auto* kernels = std::get_if<RankKernels>(&item))
        return std::max<std::size_t>(kernels->kernels.size(), 1);
    if (const auto* names = std::get_if<KernelNames>(&item))
        return std::max<std::size_t>(names->names.size(), 1);
    return 1;
}

// end - begin, clamped to [0, int64 max], without overflowing on absurd timestamps.
std::int64_t duration(std::int64_t begin, std::int64_t end)
{
    if (end <= begin)
        return 0;
    const std::uint64_t d = static_cast<std::uint64_t>(end) - static_cast<std::uint64_t>(begin);
    return d > std::uint64_t(std::numeric_limits<std::int64_t>::max()) ? std::numeric_limits<std::int64_t>::max()
                                                                       : static_cast<std::int64_t>(d);
}

// The columns of a record's row that are no field: the writer's.
constexpr std::string_view kExtras[] = {"rank", "seq"};
constexpr std::string_view kExpertLoadExtras[] = {"rank", "seq", "time_ns", "expert"};

// The parameter that binds `column` of R's table.
template <class R>
consteval int bindIndex(std::string_view column)
{
    return schema::TableColumns<R>::at(column) + 1;
}

// A field's value bound to its column; an expert load's arrays bind their entry `element`.
template <class T>
void bindValue(detail::Statement& s, int index, const T& value, std::size_t element)
{
    if constexpr (std::is_same_v<T, std::string>)
        s.bindText(index, value);
    else if constexpr (std::is_same_v<T, std::vector<std::uint32_t>>)
        s.bindInt(index, element < value.size() ? value[element] : 0);
    else if constexpr (std::is_enum_v<T>)
        s.bindInt(index, static_cast<int>(value));
    else if constexpr (std::is_floating_point_v<T>)
        s.bindReal(index, value);
    else if constexpr (std::is_same_v<T, std::uint64_t>)
        s.bindBits(index, value);  // u64 counters as the int64 with the same bits
    else
        s.bindInt(index, value);
}

template <class R>
void bindFields(detail::Statement& s, const R& record, std::size_t element = 0)
{
    schema::TableColumns<R>::forEachFieldColumn(record, [&](auto column, const auto&, const auto& value) {
        bindValue(s, static_cast<int>(column) + 1, value, element);
    });
}

constexpr int kCreateFlags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;

// Opens the file the claim created, switches it to WAL and commits the header, schema and the
// running outcome in one transaction: a session killed at any later moment has them.
detail::Connection& createSession(detail::Connection& db, const SessionHeader& header)
{
    db.exec(schema::kWriterPragmas, "setting up the session");
    detail::Statement journal(db, "PRAGMA journal_mode", "switching to WAL");
    if (!journal.step() || journal.text(0) != "wal")
        db.fileError("cannot be written: its file system does not support SQLite's WAL mode (a network file "
                     "system?); put sessions on a local disk");
    db.exec("BEGIN", "writing the session header");
    db.exec("PRAGMA application_id = " + std::to_string(kApplicationId) +
                "; PRAGMA user_version = " + std::to_string(kSchemaVersion) + ";",
            "writing the session header");
    db.exec(schema::kCreateTables, "creating the session tables");
    detail::Statement meta(db,
                           "INSERT INTO meta(id, schema_version, engine_version, created_ns, name, layout, "
                           "max_span_ns, span_count) VALUES (1, ?1, ?2, ?3, ?4, ?5, 0, 0)",
                           "writing the session header");
    meta.bindInt(1, kSchemaVersion);
    meta.bindText(2, header.engineVersion);
    meta.bindInt(3, header.createdNs);
    meta.bindText(4, header.name);
    meta.bindText(5, header.layout);
    meta.run();
    detail::Statement job(db, "INSERT INTO job(id, spec, plan_json) VALUES (1, ?1, ?2)", "writing the job spec");
    job.bindText(1, header.jobSpec);
    job.bindText(2, header.planJson);
    job.run();
    db.exec("INSERT INTO outcome(id, state, cause, failed_rank, ended_ns) VALUES (1, 'running', '', -1, 0)",
            "writing the session outcome");
    return db;
}

}  // namespace

struct SessionWriter::Impl {
    Impl(const std::string& path, const SessionHeader& header);

    void enqueue(Item item);
    void run();
    void store(Item& item);
    void store(std::uint32_t rank, std::int64_t& lastTime, const wire::Record& record);
    template <class R>
    void store(detail::Statement& insert, std::uint32_t rank, std::int64_t& lastTime, const R& record);
    void storeRank(const RankInfo& rank);
    void storeImport(const Item& item);

    const std::string path;
    detail::WriterClaim claim;  // released after the connection is closed (declared before it)
    detail::Connection db;
    detail::Statement begin, commit, updateMeta;
    detail::Statement upsertRank, upsertTraffic, updateOutcome;
    detail::Statement insertSource, insertKernelName, insertKernel, insertDeviceTime, updateMaxKernel;
    std::vector<detail::Statement> insertRecord;  // one per record type, in the order of wire::Record

    // Writer-thread state.
    std::int64_t nextSeq = 1;
    std::int64_t maxSpanNs = 0;
    std::int64_t spanCount = 0;
    std::int64_t maxKernelNs = 0;
    std::int64_t nextKernelName = 0;
    // The latest time seen from each rank: the time stamped on its expert loads, which carry none.
    std::unordered_map<std::uint32_t, std::int64_t> lastTimeByRank;

    std::mutex mutex;
    std::condition_variable wake;       // the writer: work arrived, a flush waits, or stop
    std::condition_variable committed;  // flush(): committedItems moved on, or the writer failed
    std::deque<Item> queue;
    std::size_t queuedRecords = 0;
    std::uint64_t enqueuedItems = 0;
    std::uint64_t committedItems = 0;
    int flushWaiters = 0;
    bool stopping = false;
    std::string failure;  // set once, when the writer thread stopped on an error
    std::thread thread;
};

SessionWriter::Impl::Impl(const std::string& sessionPath, const SessionHeader& header)
    : path(sessionPath), claim(sessionPath), db(sessionPath, kCreateFlags),
      begin(createSession(db, header), "BEGIN", "starting a transaction", true),
      commit(db, "COMMIT", "committing records", true),
      updateMeta(db, "UPDATE meta SET max_span_ns = ?1, span_count = ?2", "storing the span statistics", true),
      upsertRank(db,
                 "INSERT OR REPLACE INTO ranks(rank, dp, pp, tp, ep, node, local_device, host, pid) "
                 "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                 "storing a rank", true),
      upsertTraffic(db, "INSERT OR REPLACE INTO traffic(rank, received, lost, dropped) VALUES (?1, ?2, ?3, ?4)",
                    "storing traffic counts", true),
      updateOutcome(db, "UPDATE outcome SET state = ?1, cause = ?2, failed_rank = ?3, ended_ns = ?4",
                    "storing the outcome", true),
      insertSource(db,
                   "INSERT INTO import_sources(seq, path, bytes, digest, format, rank, recognised, inferred) "
                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                   "storing an imported file", true),
      insertKernelName(db, "INSERT INTO kernel_names(id, name) VALUES (?1, ?2)", "storing kernel names", true),
      insertKernel(db,
                   "INSERT INTO kernels(rank, begin_ns, seq, end_ns, device, stream, class, name, step) "
                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                   "storing kernels", true),
      insertDeviceTime(db,
                       "INSERT OR REPLACE INTO device_time(rank, step, class, busy_ns, exposed_ns) "
                       "VALUES (?1, ?2, ?3, ?4, ?5)",
                       "storing device time", true),
      updateMaxKernel(db, "UPDATE meta SET max_kernel_ns = ?1", "storing the kernel statistics", true)
{
    insertRecord.reserve(std::variant_size_v<wire::Record>);
    wire::forEachRecordType([this](auto type) {
        using R = typename decltype(type)::type;
        insertRecord.emplace_back(db, schema::insertStatement<R>(), "storing " + std::string(schema::kTable<R>.rows),
                                  true);
    });
    // The header transaction is still open (createSession): the ranks join it, then it commits.
    for (const RankInfo& rank : header.ranks)
        storeRank(rank);
    commit.run();
    claim.keep();
    thread = std::thread([this] { run(); });
}

void SessionWriter::Impl::enqueue(Item item)
{
    {
        std::lock_guard lock(mutex);
        if (!failure.empty())
            throw StoreError(failure);
        queuedRecords += recordCount(item);
        queue.push_back(std::move(item));
        ++enqueuedItems;
    }
    wake.notify_one();
}

void SessionWriter::Impl::run()
{
    std::vector<Item> taken;
    try {
        for (;;) {
            {
                std::unique_lock lock(mutex);
                wake.wait(lock, [&] { return !queue.empty() || stopping; });
                if (queue.empty())
                    return;  // stopping with everything committed
            }
            begin.run();
            const auto deadline = std::chrono::steady_clock::now() + kTransactionWindow;
            std::size_t records = 0;
            std::uint64_t items = 0;
            for (;;) {
                {
                    std::unique_lock lock(mutex);
                    // Wait for more within the window, unless someone waits for this commit.
                    if (queue.empty() && flushWaiters == 0 && !stopping)
                        wake.wait_until(lock, deadline, [&] { return !queue.empty() || flushWaiters > 0 || stopping; });
                    if (queue.empty())
                        break;
                    // Whole items only: a batch is never split over two transactions.
                    while (!queue.empty() && records < kRecordsPerTransaction) {
                        records += recordCount(queue.front());
                        queuedRecords -= recordCount(queue.front());
                        taken.push_back(std::move(queue.front()));
                        queue.pop_front();
                    }
                }
                for (Item& item : taken)
                    store(item);
                items += taken.size();
                taken.clear();
                if (records >= kRecordsPerTransaction || std::chrono::steady_clock::now() >= deadline)
                    break;
            }
            updateMeta.bindInt(1, maxSpanNs);
            updateMeta.bindInt(2, spanCount);
            updateMeta.run();
            if (maxKernelNs > 0) {
                updateMaxKernel.bindInt(1, maxKernelNs);
                updateMaxKernel.run();
            }
            commit.run();
            {
                std::lock_guard lock(mutex);
                committedItems += items;
            }
            committed.notify_all();
        }
    } catch (const std::exception& error) {
        // Everything committed so far stays; the open transaction is rolled back.
        if (!sqlite3_get_autocommit(db.handle()))
            sqlite3_exec(db.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
        {
            std::lock_guard lock(mutex);
            failure = std::string(error.what()) + "; the session holds everything committed before";
            queue.clear();
            queuedRecords = 0;
        }
        committed.notify_all();
    }
}

void SessionWriter::Impl::store(Item& item)
{
    if (auto* batch = std::get_if<wire::Batch>(&item)) {
        std::int64_t& lastTime = lastTimeByRank[batch->rank];
        for (const wire::Record& record : batch->records)
            store(batch->rank, lastTime, record);
    } else if (const auto* rank = std::get_if<RankInfo>(&item)) {
        storeRank(*rank);
    } else if (const auto* traffic = std::get_if<RankTraffic>(&item)) {
        upsertTraffic.bindInt(1, traffic->rank);
        upsertTraffic.bindBits(2, traffic->received);
        upsertTraffic.bindBits(3, traffic->lost);
        upsertTraffic.bindBits(4, traffic->dropped);
        upsertTraffic.run();
    } else if (const auto* outcome = std::get_if<SessionOutcome>(&item)) {
        updateOutcome.bindText(1, outcomeName(outcome->outcome));
        updateOutcome.bindText(2, outcome->cause);
        updateOutcome.bindInt(3, outcome->failedRank);
        updateOutcome.bindInt(4, outcome->endedNs);
        updateOutcome.run();
    } else {
        storeImport(item);
    }
}

void SessionWriter::Impl::storeImport(const Item& item)
{
    if (const auto* source = std::get_if<ImportSource>(&item)) {
        insertSource.bindInt(1, nextSeq++);
        insertSource.bindText(2, source->path);
        insertSource.bindInt(3, source->bytes);
        insertSource.bindText(4, source->digest);
        insertSource.bindText(5, source->format);
        insertSource.bindInt(6, source->rank);
        insertSource.bindText(7, source->recognised);
        insertSource.bindText(8, source->inferred);
        insertSource.run();
    } else if (const auto* names = std::get_if<KernelNames>(&item)) {
        for (const std::string& name : names->names) {
            insertKernelName.bindInt(1, nextKernelName++);
            insertKernelName.bindText(2, name);
            insertKernelName.run();
        }
    } else if (const auto* kernels = std::get_if<RankKernels>(&item)) {
        for (const KernelRow& k : kernels->kernels) {
            insertKernel.bindInt(1, kernels->rank);
            insertKernel.bindInt(2, k.beginNs);
            insertKernel.bindInt(3, nextSeq++);
            insertKernel.bindInt(4, k.endNs);
            insertKernel.bindInt(5, k.device);
            insertKernel.bindInt(6, k.stream);
            insertKernel.bindInt(7, static_cast<int>(k.deviceClass));
            insertKernel.bindInt(8, k.nameId);
            insertKernel.bindInt(9, k.step);
            insertKernel.run();
            maxKernelNs = std::max(maxKernelNs, duration(k.beginNs, k.endNs));
        }
    } else {
        for (const DeviceTimeRow& row : std::get<DeviceTime>(item).rows) {
            insertDeviceTime.bindInt(1, row.rank);
            insertDeviceTime.bindInt(2, row.step);
            insertDeviceTime.bindInt(3, static_cast<int>(row.deviceClass));
            insertDeviceTime.bindInt(4, row.busyNs);
            insertDeviceTime.bindInt(5, row.exposedNs);
            insertDeviceTime.run();
        }
    }
}

void SessionWriter::Impl::storeRank(const RankInfo& rank)
{
    upsertRank.bindInt(1, rank.rank);
    upsertRank.bindInt(2, rank.dp);
    upsertRank.bindInt(3, rank.pp);
    upsertRank.bindInt(4, rank.tp);
    upsertRank.bindInt(5, rank.ep);
    upsertRank.bindInt(6, rank.node);
    upsertRank.bindInt(7, rank.localDevice);
    upsertRank.bindText(8, rank.host);
    upsertRank.bindInt(9, rank.pid);
    upsertRank.run();
}

void SessionWriter::Impl::store(std::uint32_t rank, std::int64_t& lastTime, const wire::Record& record)
{
    detail::Statement& insert = insertRecord[record.index()];
    std::visit([&](const auto& r) { store(insert, rank, lastTime, r); }, record);
}

template <class R>
void SessionWriter::Impl::store(detail::Statement& insert, std::uint32_t rank, std::int64_t& lastTime, const R& record)
{
    if constexpr (std::is_same_v<R, wire::ExpertLoadRecord>) {
        static_assert(schema::TableColumns<R>::extrasAmong(kExpertLoadExtras));
        // One row per expert; a shorter `dropped` (a malformed record) reads as zeros.
        const std::size_t experts = std::max(record.routed.size(), record.dropped.size());
        for (std::size_t e = 0; e < experts; ++e) {
            insert.bindInt(bindIndex<R>("seq"), nextSeq++);
            insert.bindInt(bindIndex<R>("rank"), rank);
            insert.bindInt(bindIndex<R>("time_ns"), lastTime);
            insert.bindInt(bindIndex<R>("expert"), static_cast<std::int64_t>(e));
            bindFields(insert, record, e);
            insert.run();
        }
    } else {
        static_assert(schema::TableColumns<R>::extrasAmong(kExtras));
        insert.bindInt(bindIndex<R>("rank"), rank);
        insert.bindInt(bindIndex<R>("seq"), nextSeq++);
        bindFields(insert, record);
        insert.run();
        if constexpr (std::is_same_v<R, wire::SpanRecord>) {
            maxSpanNs = std::max(maxSpanNs, duration(record.beginNs, record.endNs));
            ++spanCount;
        }
        if constexpr (std::is_same_v<R, wire::SpanRecord> || std::is_same_v<R, wire::StepMetricsRecord>)
            lastTime = std::max(lastTime, record.endNs);
        else
            lastTime = std::max(lastTime, record.timeNs);
    }
}

SessionWriter::SessionWriter(const std::string& path, const SessionHeader& header)
    : m_impl(std::make_unique<Impl>(path, header))
{
}

SessionWriter::~SessionWriter()
{
    {
        std::lock_guard lock(m_impl->mutex);
        m_impl->stopping = true;
    }
    m_impl->wake.notify_all();
    m_impl->thread.join();
}

void SessionWriter::append(wire::Batch batch) { m_impl->enqueue(std::move(batch)); }

void SessionWriter::updateRank(const RankInfo& rank) { m_impl->enqueue(rank); }

void SessionWriter::setTraffic(const RankTraffic& traffic) { m_impl->enqueue(traffic); }

void SessionWriter::setOutcome(const SessionOutcome& outcome) { m_impl->enqueue(outcome); }

void SessionWriter::addImportSource(const ImportSource& source) { m_impl->enqueue(source); }

void SessionWriter::addKernelNames(std::vector<std::string> names) { m_impl->enqueue(KernelNames{std::move(names)}); }

void SessionWriter::appendKernels(std::uint32_t rank, std::vector<KernelRow> kernels)
{
    m_impl->enqueue(RankKernels{rank, std::move(kernels)});
}

void SessionWriter::addDeviceTime(std::vector<DeviceTimeRow> rows) { m_impl->enqueue(DeviceTime{std::move(rows)}); }

void SessionWriter::flush()
{
    std::unique_lock lock(m_impl->mutex);
    const std::uint64_t ticket = m_impl->enqueuedItems;
    ++m_impl->flushWaiters;
    m_impl->wake.notify_one();
    m_impl->committed.wait(lock, [&] { return m_impl->committedItems >= ticket || !m_impl->failure.empty(); });
    --m_impl->flushWaiters;
    if (!m_impl->failure.empty())
        throw StoreError(m_impl->failure);
}

std::size_t SessionWriter::queuedRecords() const
{
    std::lock_guard lock(m_impl->mutex);
    return m_impl->queuedRecords;
}

const std::string& SessionWriter::path() const { return m_impl->path; }

}  // namespace meshbench::store
