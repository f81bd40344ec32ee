// The Designer's responsiveness: re-planning after a field change (JobDocument: validate and plan,
// median of 21) beside the engine's makePlan of the same spec alone, and painting a 16,384-device
// topology. Targets: re-plan under 50 ms, topology paint under 100 ms (the view must feel instant).
//
// usage: bench_designer (QT_QPA_PLATFORM=offscreen without a display)

#include "designer/job_document.h"
#include "designer/topology_view.h"

#include "plan/planner.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QImage>

#include <algorithm>
#include <cstdio>
#include <vector>

using meshbench::app::JobDocument;
using meshbench::app::TopologyView;

namespace {

const QString kJobs = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/");

double median(std::vector<double> ms)
{
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv)
{
    QApplication app(argc, argv);
    for (const auto& [file, a, b] : {std::tuple("demo.json", 4, 8), std::tuple("gpt3-175b.json", 192, 96)}) {
        JobDocument doc;
        if (!doc.loadFile(kJobs + file)) {
            std::fprintf(stderr, "bench_designer: cannot load %s\n", file);
            return 2;
        }
        std::vector<double> replan, engine;
        for (int i = 0; i < 21; ++i) {
            QElapsedTimer timer;
            timer.start();
            doc.set(QStringLiteral("parallel.microbatches"), i % 2 ? a : b);
            replan.push_back(double(timer.nsecsElapsed()) / 1e6);
            timer.restart();
            const meshbench::plan::Plan plan = meshbench::plan::makePlan(*doc.spec());
            engine.push_back(double(timer.nsecsElapsed()) / 1e6);
            if (!plan.simulation.completed || !doc.plan())
                return 2;
        }
        std::printf("%-16s re-plan after a field change: median %7.2f ms (makePlan alone %7.2f ms)  target < 50 ms\n",
                    file, median(replan), median(engine));
    }

    JobDocument gpt3;
    if (!gpt3.loadFile(kJobs + "gpt3-175b.json"))
        return 2;
    // 2048 nodes x 8 = 16,384 devices.
    gpt3.merge({{"cluster", {{"preset", "dgx-h100x2048"}}}, {"parallel", {{"dp", 128}, {"pp", 16}, {"tp", 8}}}});
    TopologyView view;
    view.resize(900, 600);
    QElapsedTimer timer;
    timer.start();
    view.setSpec(gpt3.spec());
    const double setMs = double(timer.nsecsElapsed()) / 1e6;
    std::vector<double> paint;
    for (int i = 0; i < 9; ++i) {
        QImage image(view.size(), QImage::Format_ARGB32);
        timer.restart();
        view.render(&image);
        paint.push_back(double(timer.nsecsElapsed()) / 1e6);
    }
    std::printf("topology of 16,384 devices: setSpec %.1f ms, paint median %.1f ms  target < 100 ms\n", setMs,
                median(paint));
    return 0;
}
