#include "nsys_reader.h"

#include "import_error.h"
#include "megatron_ranges.h"
#include "trace_input.h"

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <memory>
#include <set>
#include <unordered_map>

namespace meshbench::import {

namespace {

constexpr int kNvtxPushPop = 59;
constexpr int kNvtxStartEnd = 60;
constexpr int kNvtxDomainCreate = 75;

// One of NCCL's own NVTX ranges: NCCL pushes one in its domain "NCCL" around every API call, named
// by the function ("ncclAllReduce", "ncclSend", ...), whose extended payload names the
// communicator ("NCCL communicator ID": its commHash), the message size and, for ncclSend and
// ncclRecv, the "Peer rank" within the communicator (NVIDIA/nccl src/include/nvtx.h,
// nvtx_payload_schemas.h, src/collectives.cc). nsys exports the payload as JSON keyed by those
// names in NVTX_EVENTS.jsonText (or jsonTextId into StringIds).
struct NcclRange {
    std::int64_t thread = 0;
    std::int64_t beginNs = 0, endNs = 0;
    std::string call;  // "allreduce", "send", "recv", ... (the function's name less "nccl")
    std::string communicator;
    std::int32_t peer = -1;
};

// The payload's communicator and peer; nothing when it names no communicator.
bool readNcclPayload(const std::string& json, NcclRange& range)
{
    const nlohmann::json payload = nlohmann::json::parse(json, nullptr, false);
    if (!payload.is_object())
        return false;
    const auto comm = payload.find("NCCL communicator ID");
    if (comm == payload.end())
        return false;
    if (comm->is_number_unsigned())
        range.communicator = std::to_string(comm->get<std::uint64_t>());
    else if (comm->is_number_integer())
        range.communicator = std::to_string(comm->get<std::int64_t>());
    else if (comm->is_string())
        range.communicator = comm->get<std::string>();
    else
        return false;
    const auto peer = payload.find("Peer rank");
    if (peer != payload.end() && peer->is_number_integer())
        range.peer = peer->get<std::int32_t>();
    return !range.communicator.empty();
}

class Export {
public:
    explicit Export(const std::string& path) : m_path(path)
    {
        sqlite3* db = nullptr;
        const int status = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
        m_db.reset(db);
        if (status != SQLITE_OK)
            throw ImportError(path + ": cannot be opened: " + (db ? sqlite3_errmsg(db) : "out of memory"));
        query("SELECT name FROM sqlite_master WHERE type = 'table'",
              [&](sqlite3_stmt* row) { m_tables.insert(text(row, 0)); });
    }

    bool has(const std::string& table) const { return m_tables.count(table) > 0; }

    bool hasColumn(const std::string& table, const std::string& column) const
    {
        bool found = false;
        query("SELECT name FROM pragma_table_info('" + table + "')",
              [&](sqlite3_stmt* row) { found = found || text(row, 0) == column; });
        return found;
    }

    void query(const std::string& sql, const std::function<void(sqlite3_stmt*)>& visit) const
    {
        sqlite3_stmt* raw = nullptr;
        if (sqlite3_prepare_v2(m_db.get(), sql.c_str(), -1, &raw, nullptr) != SQLITE_OK)
            throw ImportError(m_path + ": is not an nsys export this reader knows (" + sqlite3_errmsg(m_db.get()) +
                              ")");
        std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> statement(raw, sqlite3_finalize);
        int status = SQLITE_ROW;
        while ((status = sqlite3_step(raw)) == SQLITE_ROW)
            visit(raw);
        if (status != SQLITE_DONE)
            throw ImportError(m_path + ": is damaged: " + sqlite3_errmsg(m_db.get()));
    }

    static std::string text(sqlite3_stmt* row, int column)
    {
        const unsigned char* value = sqlite3_column_text(row, column);
        return value ? reinterpret_cast<const char*>(value) : "";
    }

private:
    std::string m_path;
    std::unique_ptr<sqlite3, int (*)(sqlite3*)> m_db{nullptr, sqlite3_close};
    std::set<std::string> m_tables;
};

// Every communication kernel launched inside one of NCCL's ranges (on the launching thread) takes
// the range's call, communicator and peer: nsys records no communicator on the kernel itself.
void attachNcclRanges(const Export& db, RankTrace& trace, const std::unordered_map<std::int64_t, std::string>& strings,
                      std::int64_t base)
{
    std::set<std::int64_t> domains;
    db.query("SELECT domainId, text, textId FROM NVTX_EVENTS WHERE eventType = " + std::to_string(kNvtxDomainCreate),
             [&](sqlite3_stmt* row) {
                 const auto id = strings.find(sqlite3_column_int64(row, 2));
                 const std::string name = sqlite3_column_type(row, 1) != SQLITE_NULL ? Export::text(row, 1)
                                          : id != strings.end()                      ? id->second
                                                                                     : std::string();
                 if (name == "NCCL")
                     domains.insert(sqlite3_column_int64(row, 0));
             });
    if (domains.empty())
        return;
    std::string list;
    for (std::int64_t d : domains)
        list += (list.empty() ? "" : ", ") + std::to_string(d);
    std::vector<NcclRange> ranges;
    db.query("SELECT start, end, text, textId, globalTid, jsonText, jsonTextId FROM NVTX_EVENTS WHERE eventType = " +
                 std::to_string(kNvtxPushPop) + " AND end IS NOT NULL AND domainId IN (" + list + ")",
             [&](sqlite3_stmt* row) {
                 const auto textOf = [&](int column, int idColumn) {
                     if (sqlite3_column_type(row, column) != SQLITE_NULL)
                         return Export::text(row, column);
                     const auto found = strings.find(sqlite3_column_int64(row, idColumn));
                     return found != strings.end() ? found->second : std::string();
                 };
                 const std::string name = textOf(2, 3);
                 if (!name.starts_with("nccl"))
                     return;
                 NcclRange r;
                 r.thread = sqlite3_column_int64(row, 4) % 0x1000000;
                 r.beginNs = base + sqlite3_column_int64(row, 0);
                 r.endNs = base + sqlite3_column_int64(row, 1);
                 r.call = name.substr(4);
                 std::transform(r.call.begin(), r.call.end(), r.call.begin(),
                                [](unsigned char c) { return char(std::tolower(c)); });
                 if (readNcclPayload(textOf(5, 6), r))
                     ranges.push_back(std::move(r));
             });
    if (ranges.empty())
        return;
    std::sort(ranges.begin(), ranges.end(), [](const NcclRange& a, const NcclRange& b) {
        return std::tie(a.thread, a.beginNs) < std::tie(b.thread, b.beginNs);
    });
    std::unordered_map<std::int64_t, const Launch*> launchOf;
    for (const Launch& l : trace.launches)
        launchOf.emplace(l.correlation, &l);
    for (const DeviceEvent& d : trace.device) {
        if (d.collective < 0)
            continue;
        const auto launch = launchOf.find(d.correlation);
        if (launch == launchOf.end())
            continue;
        const std::int64_t thread = launch->second->thread;
        const std::int64_t t = launch->second->ns;
        // The latest range of the thread that began at or before the launch, if it holds it.
        auto after = std::upper_bound(ranges.begin(), ranges.end(), std::pair{thread, t},
                                      [](const std::pair<std::int64_t, std::int64_t>& key, const NcclRange& r) {
                                          return key < std::pair{r.thread, r.beginNs};
                                      });
        if (after == ranges.begin())
            continue;
        const NcclRange& r = *(after - 1);
        if (r.thread != thread || t > r.endNs)
            continue;
        CollectiveInfo& c = trace.collectives[static_cast<std::size_t>(d.collective)];
        c.name = r.call;
        c.communicator = r.communicator;
        c.peer = r.peer;
    }
}

}  // namespace

RankTrace readNsysExport(const std::string& path, NameTable& names, const ReadOptions& options)
{
    RankTrace trace;
    trace.path = path;
    trace.format = "nsys-sqlite";
    const Export db(path);
    if (!db.has("META_DATA_EXPORT") && !db.has("StringIds"))
        throw ImportError(path + ": is an SQLite database but not an Nsight Systems export (no META_DATA_EXPORT); "
                                 "export the report with 'nsys export --type sqlite'");
    std::string version;
    if (db.has("META_DATA_EXPORT"))
        db.query("SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_SCHEMA_VERSION'",
                 [&](sqlite3_stmt* row) { version = Export::text(row, 0); });
    const int major = version.empty() ? -1 : std::atoi(version.c_str());
    if (major < kNsysSchemaMajorMin || major > kNsysSchemaMajorMax)
        throw ImportError(path + ": has nsys export schema version '" + (version.empty() ? "none" : version) +
                          "', this build reads versions " + std::to_string(kNsysSchemaMajorMin) + ".x to " +
                          std::to_string(kNsysSchemaMajorMax) + ".x; export it with a matching nsys");

    std::int64_t base = 0;
    if (db.has("TARGET_INFO_SESSION_START_TIME"))
        db.query("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1",
                 [&](sqlite3_stmt* row) { base = sqlite3_column_int64(row, 0); });
    std::unordered_map<std::int64_t, std::string> strings;
    if (db.has("StringIds"))
        db.query("SELECT id, value FROM StringIds",
                 [&](sqlite3_stmt* row) { strings[sqlite3_column_int64(row, 0)] = Export::text(row, 1); });
    const auto stringOf = [&](sqlite3_stmt* row, int column) -> const std::string& {
        static const std::string kNone;
        const auto found = strings.find(sqlite3_column_int64(row, column));
        return found == strings.end() ? kNone : found->second;
    };
    const auto tick = [&] {
        if ((++trace.events & 0xFFFF) == 0) {
            if (options.progress)
                options.progress(0, trace.events);
            if (options.cancelled())
                throw ImportError(path + ": the import was cancelled");
        }
    };

    // The columns every activity table shares: start, end, deviceId, streamId, correlationId.
    const auto deviceEventOf = [&](sqlite3_stmt* row, std::int32_t nameId, store::DeviceClass deviceClass) {
        tick();
        DeviceEvent d;
        d.beginNs = base + sqlite3_column_int64(row, 0);
        d.endNs = base + sqlite3_column_int64(row, 1);
        d.device = sqlite3_column_int(row, 2);
        d.stream = sqlite3_column_int(row, 3);
        d.correlation = sqlite3_column_int64(row, 4);
        d.nameId = nameId;
        d.deviceClass = deviceClass;
        if (d.endNs < d.beginNs)
            throw ImportError(path + ": '" + names.name(nameId) + "' (correlation " + std::to_string(d.correlation) +
                              ") ends before it begins");
        return d;
    };
    if (db.has("CUPTI_ACTIVITY_KIND_KERNEL"))
        db.query("SELECT start, end, deviceId, streamId, correlationId, demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL",
                 [&](sqlite3_stmt* row) {
                     const std::int32_t nameId = names.id(stringOf(row, 5));
                     DeviceEvent d = deviceEventOf(row, nameId, names.kernelClass(nameId));
                     if (store::isCommunicationClass(d.deviceClass)) {
                         d.collective = static_cast<std::int32_t>(trace.collectives.size());
                         trace.collectives.push_back({});
                     }
                     trace.device.push_back(d);
                 });
    for (const auto& [table, deviceClass, label] :
         {std::tuple{"CUPTI_ACTIVITY_KIND_MEMCPY", store::DeviceClass::Memcpy, "Memcpy"},
          std::tuple{"CUPTI_ACTIVITY_KIND_MEMSET", store::DeviceClass::Memset, "Memset"}}) {
        if (!db.has(table))
            continue;
        const std::int32_t nameId = names.id(label);
        db.query(std::string("SELECT start, end, deviceId, streamId, correlationId FROM ") + table,
                 [&, deviceClass = deviceClass](sqlite3_stmt* row) {
                     trace.device.push_back(deviceEventOf(row, nameId, deviceClass));
                 });
    }
    if (db.has("CUPTI_ACTIVITY_KIND_RUNTIME"))
        db.query("SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME", [&](sqlite3_stmt* row) {
            tick();
            trace.launches.push_back({sqlite3_column_int64(row, 2), base + sqlite3_column_int64(row, 0),
                                      sqlite3_column_int64(row, 1) % 0x1000000});
        });
    if (db.has("NVTX_EVENTS"))
        db.query("SELECT start, end, eventType, text, textId, globalTid FROM NVTX_EVENTS WHERE eventType IN (" +
                     std::to_string(kNvtxPushPop) + ", " + std::to_string(kNvtxStartEnd) + ")",
                 [&](sqlite3_stmt* row) {
                     tick();
                     const std::string name =
                         sqlite3_column_type(row, 3) != SQLITE_NULL ? Export::text(row, 3) : stringOf(row, 4);
                     if (sqlite3_column_type(row, 1) == SQLITE_NULL)
                         return;  // a range never closed
                     if (!options.steps.step(name) && !parseOpName(name) && !parseMegatronRange(name))
                         return;
                     trace.ranges.push_back({names.id(name), base + sqlite3_column_int64(row, 0),
                                             base + sqlite3_column_int64(row, 1),
                                             sqlite3_column_int64(row, 5) % 0x1000000});
                 });
    if (db.has("NVTX_EVENTS") && db.hasColumn("NVTX_EVENTS", "jsonText"))
        attachNcclRanges(db, trace, strings, base);
    trace.digest = fileDigest(path);
    sortTrace(trace);
    return trace;
}

}  // namespace meshbench::import
