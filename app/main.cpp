// meshbench: the workbench. `meshbench [JOB.json | SESSION] [--screenshot DIR [--steps N]]
// [--engine ENDPOINT [--server-key KEY_OR_FILE] [--client-key FILE]] [--offline]` opens the file
// given; the keys are CURVE's, for an engine served on tcp:// (client/client_keys.h).
// --screenshot walks through the screens and saves a PNG of each, then exits, so they can be seen
// without a display (QT_QPA_PLATFORM=offscreen): with a job and an engine it launches the job,
// captures the Monitor live, then replays the session it wrote (see ScreenshotTour).

#include "client/client_keys.h"
#include "client/engine_client.h"
#include "mainwindow/main_window.h"
#include "mainwindow/palette_theme.h"
#include "mainwindow/screenshot_tour.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QSettings>
#include <QTimer>

#include <cstdio>

using namespace meshbench::app;

int main(int argc, char** argv)
{
    QApplication application(argc, argv);
    QApplication::setApplicationName("meshbench");
    QApplication::setOrganizationName("meshbench");
    QApplication::setApplicationVersion(MESHBENCH_VERSION);
    QApplication::setWindowIcon(QIcon::fromTheme("meshbench", QIcon(":/meshbench.svg")));

    QCommandLineParser parser;
    parser.setApplicationDescription("Meshbench: design, launch, watch and replay parallel training runs");
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument("file", "a job spec (.json) or a session (.meshbench) to open", "[FILE]");
    const QCommandLineOption screenshot(
        "screenshot",
        "save a PNG of every screen into DIR, then exit: with a job and an engine, the "
        "Designer, the Monitor during the run, and the Sessions area and Monitor replaying "
        "it; otherwise the three areas as they are",
        "DIR");
    const QCommandLineOption steps("steps", "with --screenshot: run the job for N steps only", "N");
    const QCommandLineOption engine(
        "engine",
        "the engine's control endpoint (default: this user's local engine, on an ipc socket "
        "in a folder only this user enters, started if none runs)",
        "ENDPOINT");
    const QCommandLineOption serverKey("server-key",
                                       "with --engine: the engine's CURVE public key, or its server.key file (default: "
                                       "server.key in the key folder, for tcp:// endpoints)",
                                       "KEY_OR_FILE");
    const QCommandLineOption clientKey(
        "client-key",
        "with --engine: this workbench's CURVE key pair, the client.key_secret file of "
        "`meshbench-engine keys` (default: the one in the key folder, for tcp:// endpoints)",
        "FILE");
    const QCommandLineOption offline("offline", "do not connect to or start an engine");
    parser.addOptions({screenshot, steps, engine, serverKey, clientKey, offline});
    parser.process(application);
    if (parser.positionalArguments().size() > 1) {
        std::fprintf(stderr, "meshbench: one file at a time\n");
        return 2;
    }
    bool stepsOk = true;
    const int tourSteps = parser.isSet(steps) ? parser.value(steps).toInt(&stepsOk) : 0;
    if (!stepsOk || tourSteps < 0) {
        std::fprintf(stderr, "meshbench: --steps wants a whole number of steps, e.g. --steps 20\n");
        return 2;
    }

    ClientKeysChoice keys;
    if (parser.isSet(engine)) {
        keys = chooseClientKeys(parser.value(engine), parser.value(serverKey), parser.value(clientKey));
        if (!keys.error.isEmpty()) {
            std::fprintf(stderr, "meshbench: %s\n", qPrintable(keys.error));
            return 2;
        }
    } else if (parser.isSet(serverKey) || parser.isSet(clientKey)) {
        std::fprintf(stderr, "meshbench: --server-key and --client-key go with --engine ENDPOINT\n");
        return 2;
    }

    applyTheme(QSettings().value("view/theme").toString() == themeName(Theme::Dark) ? Theme::Dark : Theme::Light);
    std::unique_ptr<EngineClient> client;
    if (!parser.isSet(offline)) {
        client = std::make_unique<EngineClient>();
        if (parser.isSet(engine))
            client->connectTo(parser.value(engine), {}, keys.keys);
        else
            client->startLocalEngine();
    }
    MainWindow window(client.get());
    const QString file = parser.positionalArguments().value(0);
    // Opened before the window shows when taking screenshots: a file that cannot be opened then
    // ends the run with its reason instead of waiting on an error dialog nobody can see.
    if (parser.isSet(screenshot) && !file.isEmpty() && !window.openFile(file)) {
        std::fprintf(stderr, "meshbench: %s\n", qPrintable(window.statusMessage()));
        return 1;
    }
    window.show();
    if (!parser.isSet(screenshot) && !file.isEmpty())
        window.openFile(file);
    int status = 0;
    std::unique_ptr<ScreenshotTour> tour;
    if (parser.isSet(screenshot)) {
        tour = std::make_unique<ScreenshotTour>(window, parser.value(screenshot), tourSteps);
        QObject::connect(tour.get(), &ScreenshotTour::finished, &application, [&](bool ok, const QString& message) {
            std::fprintf(ok ? stdout : stderr, "meshbench: %s\n", qPrintable(message));
            if (!ok)
                status = 1;
            QApplication::quit();
        });
        tour->start();
    }
    const int result = QApplication::exec();
    return status != 0 ? status : result;
}
