// The kernel lanes of an imported session's timeline: nothing read or drawn zoomed out; zoomed in,
// exactly the kernels overlapping the window read, each on its rank's lane and its stream's part of
// it, in its class's colour, named by the hover; a session without kernels laid out as before.
#include "timeline/timeline_view.h"

#include "store/session_store.h"

#include <QImage>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <map>
#include <vector>

using namespace meshbench;
using namespace meshbench::app;

namespace {

constexpr std::int64_t kStart = 1'000'000'000;  // the session's clock: its spans begin at 1 s
constexpr std::int64_t kLength = 100'000'000;   // and last 100 ms
constexpr std::int64_t kUs = 1000;
constexpr int kPlotWidth = 1000;

const std::vector<std::string> kNames{"ampere_bf16_s16816gemm_128x128",
                                      "flash_fwd_kernel",
                                      "vectorized_elementwise_kernel",
                                      "Memcpy DtoD",
                                      "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                                      "ncclDevKernel_SendRecv",
                                      "ncclDevKernel_AllGather_RING_LL"};

struct Written {
    std::uint32_t rank;
    store::KernelRow kernel;
};

// Rank 0: stream 7 runs a 40 us compute kernel every 100 us (gemm, attention, elementwise, memcpy in
// turn), stream 13 a 200 us collective every 500 us (dp, pp, tp in turn). Rank 1: stream 7 only,
// its classes one step further on. None begins on a multiple of 200 us, where the 2 ms views below
// draw their grid lines.
std::vector<Written> kernelsToWrite()
{
    const store::DeviceClass compute[] = {store::DeviceClass::Gemm, store::DeviceClass::Attention,
                                          store::DeviceClass::OtherCompute, store::DeviceClass::Memcpy};
    const store::DeviceClass comm[] = {store::DeviceClass::CommData, store::DeviceClass::CommPipeline,
                                       store::DeviceClass::CommTensor};
    std::vector<Written> written;
    for (std::uint32_t rank = 0; rank < 2; ++rank)
        for (int i = 0; i < 1000; ++i) {
            const int k = (i + int(rank)) % 4;
            const std::int64_t begin = kStart + i * 100 * kUs + 30 * kUs;
            written.push_back({rank, {begin, begin + 40 * kUs, int(rank), 7, compute[k], k, i / 100}});
        }
    for (int j = 0; j < 200; ++j) {
        const std::int64_t begin = kStart + j * 500 * kUs + 60 * kUs;
        written.push_back({0, {begin, begin + 200 * kUs, 0, 13, comm[j % 3], 4 + j % 3, j / 20}});
    }
    return written;
}

// Two ranks of one stage, each one forward span over the whole session; with `kernels`, those too.
void writeSession(const QString& path, const std::vector<Written>& kernels)
{
    store::SessionHeader header;
    header.name = "imported";
    header.jobSpec = "{}";
    header.planJson = "{}";
    header.layout = "dp2";
    header.createdNs = kStart;
    header.engineVersion = "test";
    for (int r = 0; r < 2; ++r)
        header.ranks.push_back({r, r, 0, 0, 0, 0, r, "host", 0});
    store::SessionWriter writer(path.toStdString(), header);
    for (std::uint32_t r = 0; r < 2; ++r) {
        wire::SpanRecord span;
        span.kind = wire::SpanKind::Forward;
        span.beginNs = kStart;
        span.endNs = kStart + kLength;
        writer.append(wire::Batch{r, 0, {span}});
    }
    if (!kernels.empty()) {
        writer.addKernelNames(kNames);
        std::map<std::uint32_t, std::vector<store::KernelRow>> byRank;
        for (const Written& w : kernels)
            byRank[w.rank].push_back(w.kernel);
        for (auto& [rank, rows] : byRank)
            writer.appendKernels(rank, std::move(rows));
    }
    writer.setOutcome({store::Outcome::Completed, "", -1, kStart + kLength});
    writer.flush();
}

// What a window over [t0, t1] must hold, worked out from what was written: per stream, the kernels
// of `rank` with begin <= t1 and end >= t0, by begin.
std::map<std::int32_t, std::vector<store::KernelRow>>
expectedLanes(const std::vector<Written>& written, std::uint32_t rank, std::int64_t t0, std::int64_t t1)
{
    std::map<std::int32_t, std::vector<store::KernelRow>> lanes;
    for (const Written& w : written)
        if (w.rank == rank && w.kernel.beginNs <= t1 && w.kernel.endNs >= t0)
            lanes[w.kernel.stream].push_back(w.kernel);
    for (auto& [stream, kernels] : lanes)
        std::sort(kernels.begin(), kernels.end(),
                  [](const store::KernelRow& a, const store::KernelRow& b) { return a.beginNs < b.beginNs; });
    return lanes;
}

std::map<std::int32_t, std::vector<store::KernelRow>> heldLanes(const KernelWindow& window, int rank)
{
    std::map<std::int32_t, std::vector<store::KernelRow>> lanes;
    for (const KernelLane& lane : window.lanes(rank))
        lanes[lane.stream] = lane.kernels;
    return lanes;
}

QImage rendered(TimelineView& view)
{
    QImage image(view.size(), QImage::Format_RGB32);
    view.render(&image);
    return image;
}

// Whether line y of `image` across `lane` is bare: the same pixels as the empty space below the rows
// at `empty` (the row background with the ruler's grid lines over it).
bool bare(const QImage& image, const QRect& lane, int empty)
{
    for (int x = lane.left(); x <= lane.right(); ++x)
        for (int y = lane.top() + 1; y < lane.bottom(); ++y)
            if (image.pixel(x, y) != image.pixel(x, empty))
                return false;
    return true;
}

// The pixel at the middle of `kernel`, in the middle of stream lane `index` of `count` in `lane`.
QPoint centreOf(const TimelineView& view, const store::KernelRow& kernel, const QRect& lane, int index, int count)
{
    const auto [top, bottom] = TimelineLayout::streamLane(lane.height(), index, count);
    return {int(view.xForTime((kernel.beginNs + kernel.endNs) / 2)), lane.top() + (top + bottom) / 2};
}

// A stored session's timeline as the Monitor shows it, with a plot kPlotWidth pixels wide.
struct ShownSession {
    store::SessionReader reader;
    TimelineData data;
    TimelineView view;

    explicit ShownSession(const QString& path) : reader(path.toStdString())
    {
        data.loadSession(reader);
        view.setData(&data);
        view.resize(view.plotArea().left() + kPlotWidth, 400);
    }
};

}  // namespace

class TestTimelineKernels : public QObject {
    Q_OBJECT
private slots:
    void init();
    void legibilityIsOneRule();
    void zoomedOutNothingIsReadOrDrawn();
    void zoomedInTheWindowsKernelsAreReadAndDrawn();
    void sessionWithoutKernelsIsLaidOutAsBefore();
    void replayedSpansTakeTheSessionsKernels();

private:
    QTemporaryDir m_dir;
    QString m_withKernels, m_withoutKernels;
    std::vector<Written> m_written;
};

void TestTimelineKernels::init()
{
    QVERIFY(m_dir.isValid());
    if (!m_withKernels.isEmpty())
        return;
    m_written = kernelsToWrite();
    m_withKernels = m_dir.filePath("imported.meshbench");
    m_withoutKernels = m_dir.filePath("agent.meshbench");
    writeSession(m_withKernels, m_written);
    writeSession(m_withoutKernels, {});
}

void TestTimelineKernels::legibilityIsOneRule()
{
    QVERIFY(kernelsLegible(0, 10'000'000, 1000));  // 10 us per pixel
    QVERIFY(!kernelsLegible(0, 10'000'001, 1000));
    QVERIFY(!kernelsLegible(0, 100, 0));
    QCOMPARE(kernelWindowFor(5000, 7000), std::make_pair(std::int64_t(3000), std::int64_t(9000)));
}

void TestTimelineKernels::zoomedOutNothingIsReadOrDrawn()
{
    ShownSession shown(m_withKernels);
    TimelineData& data = shown.data;
    TimelineView& view = shown.view;
    TimelineKernels* kernels = data.kernels();
    QVERIFY(kernels);
    QCOMPARE(view.plotArea().width(), kPlotWidth);
    // Fitted: 100 ms over 1000 px, 100 us per pixel.
    QCOMPARE(view.visibleRange(), std::make_pair(kStart, kStart + kLength));
    // Just past the threshold: 11 us per pixel.
    view.setVisibleRange(kStart + 20'000'000, kStart + 31'000'000);
    QCOMPARE(kernels->reads(), 0);
    QVERIFY(!kernels->reading());
    QVERIFY(!kernels->window());

    const QImage image = rendered(view);
    const int empty = view.kernelLaneRect(1).bottom() + 20;
    QVERIFY(empty < view.height());
    for (int row = 0; row < 2; ++row) {
        QVERIFY(!view.kernelLaneRect(row).isEmpty());
        QVERIFY(bare(image, view.kernelLaneRect(row), empty));
    }
    const QPoint label(10, view.kernelLaneRect(0).center().y());
    QVERIFY(view.toolTipTextAt(label).contains(QStringLiteral("at 10 us per pixel or closer; now 11 us per pixel")));
    QVERIFY(view.toolTipTextAt(view.kernelLaneRect(0).center()).isEmpty());
}

void TestTimelineKernels::zoomedInTheWindowsKernelsAreReadAndDrawn()
{
    ShownSession shown(m_withKernels);
    TimelineData& data = shown.data;
    TimelineView& view = shown.view;
    TimelineKernels* kernels = data.kernels();
    QVERIFY(kernels);
    QCOMPARE(kernels->reads(), 0);

    // 2 ms over 1000 px: 2 us per pixel, legible.
    const std::int64_t t0 = kStart + 20'000'000, t1 = kStart + 22'000'000;
    QSignalSpy loaded(kernels, &TimelineKernels::loaded);
    view.setVisibleRange(t0, t1);
    QVERIFY(kernels->reading());
    QVERIFY(loaded.wait(20'000));
    QVERIFY(kernels->error().isEmpty());
    QCOMPARE(kernels->reads(), 1);
    const KernelWindow* window = kernels->window();
    QVERIFY(window);
    QCOMPARE(std::make_pair(window->t0(), window->t1()), kernelWindowFor(t0, t1));
    QVERIFY(window->covers(t0, t1));
    std::size_t expectedSize = 0;
    for (std::uint32_t rank = 0; rank < 2; ++rank) {
        const auto expected = expectedLanes(m_written, rank, window->t0(), window->t1());
        QVERIFY(!expected.empty());
        QVERIFY(heldLanes(*window, int(rank)) == expected);
        for (const auto& [stream, rows] : expected)
            expectedSize += rows.size();
    }
    QCOMPARE(window->size(), expectedSize);
    // [18, 24] ms: compute kernels 180 to 239 of each rank and collectives 36 to 47 of rank 0.
    QCOMPARE(expectedSize, std::size_t(2 * 60 + 12));
    QCOMPARE(kernels->streams(0).size(), std::size_t(2));
    QCOMPARE(kernels->streams(1).size(), std::size_t(1));

    // Panning inside the window read reads nothing more.
    view.setVisibleRange(t0 + 1'000'000, t1 + 1'000'000);
    QVERIFY(!kernels->reading());
    QCOMPARE(kernels->reads(), 1);

    // Each rank's lane lies under its own row.
    const int row0 = data.store().rowOfRank(0), row1 = data.store().rowOfRank(1);
    QCOMPARE(view.kernelLaneRect(row0).top(), view.rowRect(row0).bottom() + 1);
    QCOMPARE(view.kernelLaneRect(row1).top(), view.rowRect(row1).bottom() + 1);

    // Rank 1's kernel 212 (attention, [21.23, 21.27] ms) and rank 0's collective 44 (tensor parallel,
    // [22.06, 22.26] ms) in the lower of rank 0's two stream lanes.
    const store::KernelRow attention = m_written[1000 + 212].kernel;
    QVERIFY(attention.deviceClass == store::DeviceClass::Attention);
    const store::KernelRow collective = m_written[2000 + 44].kernel;
    QVERIFY(collective.deviceClass == store::DeviceClass::CommTensor);
    const QPoint onAttention = centreOf(view, attention, view.kernelLaneRect(row1), 0, 1);
    const QPoint onCollective = centreOf(view, collective, view.kernelLaneRect(row0), 1, 2);
    const QImage image = rendered(view);
    QCOMPARE(QColor(image.pixel(onAttention)), TimelineStyle::deviceClassColor(store::DeviceClass::Attention));
    QCOMPARE(QColor(image.pixel(onCollective)), TimelineStyle::deviceClassColor(store::DeviceClass::CommTensor));
    // Rank 0's upper stream lane at the collective's time: its compute kernel 221 (attention, from 22.13 ms).
    const store::KernelRow above = m_written[221].kernel;
    QVERIFY(above.deviceClass == store::DeviceClass::Attention && above.stream == 7);
    const QPoint aboveCollective = centreOf(view, above, view.kernelLaneRect(row0), 0, 2);
    QCOMPARE(QColor(image.pixel(aboveCollective)), TimelineStyle::deviceClassColor(store::DeviceClass::Attention));

    const QString hover = view.toolTipTextAt(onAttention);
    QVERIFY2(hover.contains(QStringLiteral("kernel: flash_fwd_kernel")), qPrintable(hover));
    QVERIFY(hover.contains(QStringLiteral("rank: 1")));
    QVERIFY(hover.contains(QStringLiteral("class: attention")));
    QVERIFY(hover.contains(QStringLiteral("stream: 7")));
    QVERIFY(hover.contains(QStringLiteral("step: 2")));
    QVERIFY(hover.contains(QStringLiteral("duration: 40 us")));
    const QString commHover = view.toolTipTextAt(onCollective);
    QVERIFY2(commHover.contains(QStringLiteral("kernel: ncclDevKernel_AllGather_RING_LL")), qPrintable(commHover));
    QVERIFY(commHover.contains(QStringLiteral("class: comm-tp")));
    QVERIFY(commHover.contains(QStringLiteral("stream: 13")));
    QVERIFY(commHover.contains(QStringLiteral("duration: 200 us")));

    // Zoomed out again: the window is kept but nothing is read or drawn.
    view.fitAll();
    QCOMPARE(kernels->reads(), 1);
    QVERIFY(!kernels->reading());
    const QImage out = rendered(view);
    const int empty = view.kernelLaneRect(row1).bottom() + 20;
    QVERIFY(bare(out, view.kernelLaneRect(row0), empty));
    QVERIFY(bare(out, view.kernelLaneRect(row1), empty));
    QVERIFY(view.toolTipTextAt(onAttention).isEmpty());
}

void TestTimelineKernels::sessionWithoutKernelsIsLaidOutAsBefore()
{
    ShownSession shown(m_withoutKernels);
    TimelineData& data = shown.data;
    TimelineView& view = shown.view;
    QVERIFY(!data.kernels());
    view.setVisibleRange(kStart + 20'000'000, kStart + 22'000'000);
    QVERIFY(view.kernelLaneRect(0).isEmpty());
    QVERIFY(view.kernelLaneRect(1).isEmpty());
    // The header, then the two rows back to back.
    QCOMPARE(view.rowRect(0).top(), view.plotArea().top() + TimelineLayout::kHeaderHeight);
    QCOMPARE(view.rowRect(1).top(), view.rowRect(0).bottom() + 1);
    QCOMPARE(view.toolTipTextAt(QPoint(10, view.rowRect(1).bottom() + 5)), QString());
}

void TestTimelineKernels::replayedSpansTakeTheSessionsKernels()
{
    // A replay's spans arrive live; its session's kernels are shown beside them until the data is cleared.
    const store::SessionReader reader(m_withKernels.toStdString());
    TimelineData data;
    data.setRows(rowsForRanks(reader.header().ranks));
    TimelineSpan whole;
    whole.beginNs = kStart;
    whole.endNs = kStart + kLength;
    data.appendSpans(0, std::span(&whole, 1));
    TimelineView view;
    view.setData(&data);
    view.resize(view.plotArea().left() + kPlotWidth, 400);
    QVERIFY(view.kernelLaneRect(0).isEmpty());
    data.showKernelsOf(reader);
    QVERIFY(data.kernels());
    QCOMPARE(view.kernelLaneRect(0).top(), view.rowRect(0).bottom() + 1);
    QSignalSpy loaded(data.kernels(), &TimelineKernels::loaded);
    view.setVisibleRange(kStart + 20'000'000, kStart + 22'000'000);
    QVERIFY(loaded.wait(20'000));
    QCOMPARE(data.kernels()->window()->size(), std::size_t(2 * 60 + 12));
    data.clear();
    QVERIFY(!data.kernels());
    QVERIFY(view.kernelLaneRect(0).isEmpty());
}

QTEST_MAIN(TestTimelineKernels)
#include "tst_timeline_kernels.moc"
