// bench_timeline: the timeline with 10 million spans, rendered offscreen at 1920x1080.
//
// 64 ranks (8 pipeline stages x 8) run a 1F1B schedule of 32 micro-batches per step (the planner's
// own op lists, simulated with F = 100 us, B = 200 us, 10 us transfers), then a dp-reduce and the
// optimizer, with per-rank jitter, for as many steps as make ~156k spans per rank. Printed: the data
// build (sorting in, level-of-detail buckets), then the first frame (fit all), pan and zoom frames,
// and frames zoomed in far enough for blocks and labels, each next to its target and to the
// reference: filling the same image with one QPainter::fillRect per pixel column per row, the least
// any timeline must draw.
#include "timeline/timeline_loaders.h"
#include "timeline/timeline_view.h"

#include "plan/op_span_kind.h"
#include "plan/schedule.h"
#include "plan/simulator.h"

#include <QApplication>
#include <QImage>
#include <QPainter>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <time.h>

using namespace meshbench;
using namespace meshbench::app;

namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start)
{
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double residentMiB()
{
    std::ifstream statm("/proc/self/statm");
    long pages = 0, resident = 0;
    statm >> pages >> resident;
    return double(resident) * 4096.0 / (1 << 20);
}

double threadCpuMs()
{
    timespec now{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return double(now.tv_sec) * 1e3 + double(now.tv_nsec) / 1e6;
}

// Wall time of one frame; its CPU time (this thread's, unaffected by other processes sharing the
// machine) is added to `cpu`.
double renderMs(TimelineView& view, QImage& image, std::vector<double>* cpu = nullptr)
{
    const double cpu0 = threadCpuMs();
    const auto start = Clock::now();
    view.render(&image);
    const double wall = msSince(start);
    if (cpu)
        cpu->push_back(threadCpuMs() - cpu0);
    return wall;
}

double median(std::vector<double> values)
{
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv)
{
    qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);

    constexpr int kStages = 8, kRanksPerStage = 8, kMicrobatches = 32;
    constexpr std::size_t kTargetSpans = 10'000'000;
    constexpr double kUnitNs = 100'000;  // F = 1 unit = 100 us

    const plan::Schedule schedule = plan::buildSchedule({plan::ScheduleKind::OneFOneB, kStages, kMicrobatches, 1, 0});
    const plan::SimulationResult sim = simulate(schedule, plan::OpCosts::uniform(schedule.shape, 1.0, 2.0, 0.0, 0.1));
    if (!sim.completed) {
        std::fprintf(stderr, "simulation failed: %s\n", sim.error.c_str());
        return 1;
    }
    std::size_t spansPerStep = 0;  // over all ranks: each stage's ops, a dp-reduce and the optimizer
    for (const auto& ops : sim.timeline)
        spansPerStep += kRanksPerStage * (ops.size() + 2);
    const std::size_t steps = (kTargetSpans + spansPerStep - 1) / spansPerStep;
    const double opsPerStep = double(spansPerStep) / (kStages * kRanksPerStage);
    const double stepUnits = sim.makespan + 3.0 + 1.0 + 0.5;  // dp-reduce 3, optimizer 1, gap 0.5

    // Generate step by step and append per rank, as the live feed would; only the appends are timed.
    TimelineStore store;
    std::vector<RowInfo> rows;
    for (int rank = 0; rank < kStages * kRanksPerStage; ++rank) {
        const int stage = rank / kRanksPerStage;
        rows.push_back({rank, stage, rankLabel(rank, rank % kRanksPerStage / 2, stage, rank % 2)});
    }
    store.setRows(rows);
    store.setBaseShift(TimelineStore::shiftForSpacing(stepUnits * kUnitNs / opsPerStep));
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> jitter(0.97, 1.03);
    std::vector<TimelineSpan> spans;
    double buildMs = 0;
    const double rssBefore = residentMiB();
    for (std::size_t step = 0; step < steps; ++step) {
        const double stepBegin = double(step) * stepUnits * kUnitNs;
        for (int rank = 0; rank < kStages * kRanksPerStage; ++rank) {
            const int stage = rank / kRanksPerStage;
            const double scale = jitter(rng) * kUnitNs;
            spans.clear();
            const auto add = [&](double b, double e, wire::SpanKind kind, int microbatch, int peer) {
                TimelineSpan s;
                s.beginNs = std::llround(stepBegin + b * scale);
                s.endNs = std::llround(stepBegin + e * scale);
                s.kind = kind;
                s.microbatch = microbatch;
                s.step = int(step);
                s.stage = std::int16_t(stage);
                s.peer = peer;
                s.bytes = peer >= 0 ? 8u << 20 : 0;
                spans.push_back(s);
            };
            for (const plan::TimedOp& op : sim.timeline[std::size_t(stage)])
                add(op.begin, op.end, plan::spanKindOf(op.op.kind), op.op.microbatch,
                    op.op.peerStage < 0 ? -1 : op.op.peerStage * kRanksPerStage + rank % kRanksPerStage);
            add(sim.makespan, sim.makespan + 3.0, wire::SpanKind::DataParallelReduce, -1, -1);
            add(sim.makespan + 3.0, sim.makespan + 4.0, wire::SpanKind::Optimizer, -1, -1);
            const auto start = Clock::now();
            store.append(rank, spans);
            buildMs += msSince(start);
        }
    }
    const double rssAfter = residentMiB();
    const std::size_t total = store.spanCount();

    TimelineData data;
    data.setStore(std::move(store));
    TimelineView view;
    view.setRowHeight(13);
    view.resize(1920, 1080);
    view.setData(&data);
    QImage image(1920, 1080, QImage::Format_ARGB32_Premultiplied);

    std::printf("bench_timeline: %zu spans on %d ranks (%d stages), %zu steps of 1F1B with %d micro-batches, %.1f s of "
                "timeline\n",
                total, kStages * kRanksPerStage, kStages, steps, kMicrobatches,
                double(data.store().endTime() - data.store().beginTime()) / 1e9);
    std::printf("data build (sort + level-of-detail): %8.1f ms  (%.0f ns/span), memory %.1f bytes/span\n", buildMs,
                buildMs * 1e6 / double(total), (rssAfter - rssBefore) * double(1 << 20) / double(total));

    view.fitAll();
    std::vector<double> firstCpu, panCpu, zoomCpu, deepPanCpu, deepZoomCpu;
    const double first = renderMs(view, image, &firstCpu);
    if (argc > 1)  // a path: save the first and the last frame to look at
        image.save(QString::fromLocal8Bit(argv[1]) + QStringLiteral("-fit.png"));
    const auto [t0, t1] = view.visibleRange();
    std::vector<double> pans, zooms, deepPans, deepZooms;
    for (int k = 1; k <= 5; ++k) {
        const std::int64_t shift = (t1 - t0) / 20 * k;
        view.setVisibleRange(t0 + shift, t1 + shift);
        pans.push_back(renderMs(view, image, &panCpu));
    }
    view.fitAll();
    const double center = view.plotArea().center().x();
    for (int k = 0; k < 5; ++k) {
        view.zoomAt(0.7, center + k * 40);
        zooms.push_back(renderMs(view, image, &zoomCpu));
    }
    // Two steps across: blocks a few pixels wide with micro-batch numbers inside.
    const std::int64_t stepNs = std::llround(stepUnits * kUnitNs);
    const std::int64_t mid = (t0 + t1) / 2;
    view.setVisibleRange(mid, mid + 2 * stepNs);
    renderMs(view, image);
    for (int k = 1; k <= 5; ++k) {
        view.setVisibleRange(mid + k * stepNs / 10, mid + 2 * stepNs + k * stepNs / 10);
        deepPans.push_back(renderMs(view, image, &deepPanCpu));
    }
    for (int k = 0; k < 5; ++k) {
        view.zoomAt(0.8, center);
        deepZooms.push_back(renderMs(view, image, &deepZoomCpu));
    }
    if (argc > 1)
        image.save(QString::fromLocal8Bit(argv[1]) + QStringLiteral("-deep.png"));

    // Reference: one fillRect per pixel column per row over the same plot area.
    const QRect plot = view.plotArea();
    const int rowsShown = std::min(kStages * kRanksPerStage, plot.height() / view.rowHeight());
    std::vector<double> references;
    for (int k = 0; k < 5; ++k) {
        const auto start = Clock::now();
        QPainter painter(&image);
        for (int r = 0; r < rowsShown; ++r)
            for (int x = 0; x < plot.width(); ++x)
                painter.fillRect(QRect(plot.left() + x, plot.top() + r * view.rowHeight(), 1, view.rowHeight() - 2),
                                 TimelineView::classColor(KindClass((x + r) % kKindClasses)));
        painter.end();
        references.push_back(msSince(start));
    }
    const double reference = median(references);

    std::printf("reference: fillRect per pixel column per row (%d rows x %d columns): %.2f ms\n", rowsShown,
                plot.width(), reference);
    const auto report = [&](const char* name, double wall, const std::vector<double>& cpu, double target) {
        std::printf("%-26s %8.2f ms (cpu %6.2f ms)   target < %4.0f ms   %.2fx reference\n", name, wall, median(cpu),
                    target, wall / reference);
    };
    report("first frame (fit all)", first, firstCpu, 1000);
    report("pan frame (median of 5)", median(pans), panCpu, 16);
    report("zoom frame (median of 5)", median(zooms), zoomCpu, 16);
    report("deep pan (2 steps across)", median(deepPans), deepPanCpu, 16);
    report("deep zoom (from 2 steps)", median(deepZooms), deepZoomCpu, 16);
    const auto list = [](const char* name, const std::vector<double>& values) {
        std::printf("  %-10s", name);
        for (const double v : values)
            std::printf(" %7.2f", v);
        std::printf(" ms\n");
    };
    std::printf("every frame:\n");
    list("pan", pans);
    list("zoom", zooms);
    list("deep pan", deepPans);
    list("deep zoom", deepZooms);
    return 0;
}
