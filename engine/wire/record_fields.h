#pragma once
// Each record type's fields, listed once: in wire order, each with its name, the column of the
// session's SQLite table that stores it (engine/store/schema.h). The wire codec (telemetry.cpp),
// the session writer and reader and the CSV and Chrome trace exports walk these lists, so a new
// field is a member of its struct (telemetry.h) and a line here. What must stay special stays with
// its codec: the paired arrays of expert loads, strings' repair and limits, enumerations' ranges.
//
// A field holds a scalar (an integer, a float or double, an enumeration sent as its u8 value), a
// string, or (expert loads) an array of u32. Columns<R, Order> puts the fields in another order
// by name, with columns that are not fields (rank, seq) among them: a table's or a file's.

#include "telemetry.h"

#include <array>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

namespace meshbench::wire {

template <class R, class T>
struct Field {
    using Record = R;
    using Value = T;

    std::string_view name;  // the SQLite column; also the CSV column and the Chrome trace's arg
    T R::*member;
    std::string_view label = {};    // how codec messages name it, where not by name
    std::string_view csvName = {};  // the CSV header, where the published one differs from name

    constexpr std::string_view what() const { return label.empty() ? name : label; }
    constexpr std::string_view csv() const { return csvName.empty() ? name : csvName; }
    constexpr Field labelled(std::string_view text) const { return {name, member, text, csvName}; }
    constexpr Field inCsvAs(std::string_view header) const { return {name, member, label, header}; }
};

template <class R, class T>
constexpr Field<R, T> field(std::string_view name, T R::*member)
{
    return {name, member};
}

// The fields of R in wire order: a tuple of Fields.
template <class R>
constexpr auto fieldList()
{
    if constexpr (std::is_same_v<R, SpanRecord>) {
        return std::tuple{
            field("step", &R::step),
            field("stage", &R::stage),
            field("chunk", &R::chunk),
            field("microbatch", &R::microbatch),
            field("kind", &R::kind).labelled("span kind"),
            field("peer", &R::peerRank),
            field("begin_ns", &R::beginNs),
            field("end_ns", &R::endNs),
            field("bytes", &R::bytes),
        };
    } else if constexpr (std::is_same_v<R, ExpertLoadRecord>) {
        return std::tuple{
            field("step", &R::step),
            field("layer", &R::layer),
            field("routed", &R::routed),
            field("dropped", &R::dropped),
        };
    } else if constexpr (std::is_same_v<R, MemorySampleRecord>) {
        return std::tuple{
            field("step", &R::step),
            field("time_ns", &R::timeNs),
            field("category", &R::category).labelled("memory category"),
            field("current_bytes", &R::currentBytes),
            field("peak_bytes", &R::peakBytes),
        };
    } else if constexpr (std::is_same_v<R, StepMetricsRecord>) {
        return std::tuple{
            field("step", &R::step),
            field("begin_ns", &R::beginNs),
            field("end_ns", &R::endNs),
            field("loss", &R::loss),
            field("aux_loss", &R::auxLoss),
            field("grad_norm", &R::gradNorm),
            field("learning_rate", &R::learningRate).inCsvAs("lr"),
            field("tokens_per_s", &R::tokensPerSecond),
            field("bubble_ratio", &R::bubbleRatio),
            field("tokens", &R::tokens),
        };
    } else if constexpr (std::is_same_v<R, NodeSampleRecord>) {
        return std::tuple{
            field("time_ns", &R::timeNs),
            field("host", &R::host).labelled("host name"),
            field("host_memory_total", &R::hostMemoryTotalBytes).inCsvAs("host_memory_total_bytes"),
            field("host_memory_used", &R::hostMemoryUsedBytes).inCsvAs("host_memory_used_bytes"),
            field("device", &R::device),
            field("device_memory_total", &R::deviceMemoryTotalBytes).inCsvAs("device_memory_total_bytes"),
            field("device_memory_used", &R::deviceMemoryUsedBytes).inCsvAs("device_memory_used_bytes"),
            field("device_utilization", &R::deviceUtilization),
        };
    } else if constexpr (std::is_same_v<R, LogRecord>) {
        return std::tuple{
            field("time_ns", &R::timeNs),
            field("level", &R::level).labelled("log level"),
            field("text", &R::text),
        };
    } else if constexpr (std::is_same_v<R, HeartbeatRecord>) {
        return std::tuple{
            field("time_ns", &R::timeNs),
            field("state", &R::state).labelled("rank state"),
            field("step", &R::step),
            field("pid", &R::pid),
            field("detail", &R::detail),
            field("dropped_records", &R::droppedRecords),
            field("host", &R::host).labelled("host name"),
        };
    } else {
        static_assert(std::is_same_v<R, ClockOffsetRecord>, "a new record type needs its field list here");
        return std::tuple{
            field("time_ns", &R::timeNs),
            field("offset_ns", &R::offsetNs),
            field("round_trip_ns", &R::roundTripNs),
        };
    }
}

// The enumerations fields hold: how many values (each below that is valid) and their names.
template <class E>
struct EnumInfo;

template <>
struct EnumInfo<SpanKind> {
    static constexpr int count = kSpanKinds;
    static std::string_view name(SpanKind value) { return spanKindName(value); }
};

template <>
struct EnumInfo<MemoryCategory> {
    static constexpr int count = kMemoryCategories;
    static std::string_view name(MemoryCategory value) { return memoryCategoryName(value); }
};

template <>
struct EnumInfo<LogLevel> {
    static constexpr int count = kLogLevels;
    static std::string_view name(LogLevel value) { return logLevelName(value); }
};

template <>
struct EnumInfo<RankState> {
    static constexpr int count = kRankStates;
    static std::string_view name(RankState value) { return rankStateName(value); }
};

template <class R>
inline constexpr auto kFields = fieldList<std::remove_const_t<R>>();

template <class R>
inline constexpr std::size_t kFieldCount = std::tuple_size_v<std::remove_cvref_t<decltype(kFields<R>)>>;

// Calls visit(field, record.*field.member) for each field of `record` (const or not) in wire
// order. A visit that returns bool stops the walk at the first false, and the walk returns whether
// it got to the end.
template <class R, class F>
constexpr auto forEachField(R& record, F&& visit)
{
    return std::apply(
        [&](const auto&... field) {
            if constexpr ((std::is_void_v<decltype(visit(field, record.*field.member))> && ...))
                (visit(field, record.*field.member), ...);
            else
                return (static_cast<bool>(visit(field, record.*field.member)) && ...);
        },
        kFields<R>);
}

// Calls visit(std::type_identity<R>{}) for each record type, in the order of the Record variant.
template <class F>
constexpr void forEachRecordType(F&& visit)
{
    [&]<std::size_t... I>(std::index_sequence<I...>)
    {
        (visit(std::type_identity<std::variant_alternative_t<I, Record>>{}), ...);
    }
    (std::make_index_sequence<std::variant_size_v<Record>>{});
}

// ---- the fields in another order ----

// In an order of columns: the record's fields the order does not name, in wire order.
inline constexpr std::string_view kOtherFields = "*";

// The columns of `Order` (an array of names) over the fields of R: a name is a field's, or a
// column that is not a field (an "extra": rank, seq, ...); kOtherFields stands for the fields not
// named. An order without it is a selection of fields.
template <class R, const auto& Order>
struct Columns {
private:
    static constexpr auto fieldNames()
    {
        return std::apply(
            [](const auto&... field) { return std::array<std::string_view, sizeof...(field)>{field.name...}; },
            kFields<R>);
    }
    static constexpr int fieldIndex(std::string_view name)
    {
        constexpr auto all = fieldNames();
        for (std::size_t i = 0; i < all.size(); ++i)
            if (all[i] == name)
                return int(i);
        return -1;
    }
    static constexpr bool named(std::string_view name)
    {
        for (std::string_view entry : Order)
            if (entry == name)
                return true;
        return false;
    }
    static constexpr std::size_t columnCount()
    {
        std::size_t columns = 0;
        for (std::string_view entry : Order)
            if (entry != kOtherFields)
                ++columns;
            else
                for (std::string_view name : fieldNames())
                    columns += named(name) ? 0 : 1;
        return columns;
    }
    static constexpr bool wellFormed()
    {
        int others = 0;
        for (std::size_t i = 0; i < std::size(Order); ++i) {
            others += Order[i] == kOtherFields;
            for (std::size_t j = 0; j < i; ++j)
                if (Order[i] == Order[j])
                    return false;
        }
        return others <= 1;
    }
    static_assert(wellFormed(), "an order names each column once and holds kOtherFields at most once");

public:
    static constexpr std::size_t count = columnCount();

    static constexpr std::array<std::string_view, count> names = [] {
        std::array<std::string_view, count> out{};
        std::size_t at = 0;
        for (std::string_view entry : Order)
            if (entry != kOtherFields)
                out[at++] = entry;
            else
                for (std::string_view name : fieldNames())
                    if (!named(name))
                        out[at++] = name;
        return out;
    }();

    // The field each column holds, -1 for an extra.
    static constexpr std::array<int, count> fields = [] {
        std::array<int, count> out{};
        for (std::size_t c = 0; c < count; ++c)
            out[c] = fieldIndex(names[c]);
        return out;
    }();

    // The index of the column `name`; -1 if there is none.
    static constexpr int of(std::string_view name)
    {
        for (std::size_t c = 0; c < count; ++c)
            if (names[c] == name)
                return int(c);
        return -1;
    }

    // The index of the column `name`, which the order must have: a compile-time error otherwise.
    static consteval int at(std::string_view name)
    {
        const int column = of(name);
        if (column < 0)
            throw "the order has no such column";
        return column;
    }

    // Whether every column that is not a field is one of `allowed`.
    template <std::size_t N>
    static constexpr bool extrasAmong(const std::string_view (&allowed)[N])
    {
        for (std::size_t c = 0; c < count; ++c) {
            bool known = fields[c] >= 0;
            for (std::string_view name : allowed)
                known = known || names[c] == name;
            if (!known)
                return false;
        }
        return true;
    }

    // For each column in order: onField(column, field, record.*field.member) for a field and
    // onExtra(column) for an extra, `column` a std::integral_constant<std::size_t, index>.
    template <class Rec, class OnField, class OnExtra>
    static constexpr void forEach(Rec& record, OnField&& onField, OnExtra&& onExtra)
    {
        [&]<std::size_t... C>(std::index_sequence<C...>)
        {
            (visitColumn(std::integral_constant<std::size_t, C>{}, record, onField, onExtra), ...);
        }
        (std::make_index_sequence<count>{});
    }

    // onField for each field column, in column order.
    template <class Rec, class OnField>
    static constexpr void forEachFieldColumn(Rec& record, OnField&& onField)
    {
        forEach(record, onField, [](auto) {});
    }

private:
    template <std::size_t C, class Rec, class OnField, class OnExtra>
    static constexpr void visitColumn(std::integral_constant<std::size_t, C> column, Rec& record, OnField& onField,
                                      OnExtra& onExtra)
    {
        static_assert(std::is_same_v<std::remove_const_t<Rec>, R>);
        if constexpr (constexpr int f = fields[C]; f >= 0) {
            constexpr const auto& field = std::get<f>(kFields<R>);
            onField(column, field, record.*field.member);
        } else {
            onExtra(column);
        }
    }
};

}  // namespace meshbench::wire
