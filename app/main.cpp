// meshbench: the workbench. `meshbench [JOB.json | SESSION] [--screenshot DIR] [--engine ENDPOINT]
// [--offline]` opens the file given; --screenshot saves a PNG of each area and exits, so every
// screen can be seen without a display (QT_QPA_PLATFORM=offscreen).

#include "client/engine_client.h"
#include "mainwindow/main_window.h"
#include "mainwindow/palette_theme.h"

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
    const QCommandLineOption screenshot("screenshot", "save designer.png, monitor.png and sessions.png into DIR, then exit",
                                        "DIR");
    const QCommandLineOption engine("engine", "the engine's control endpoint (default: a local engine on tcp://127.0.0.1:5570, "
                                              "started if none runs)", "ENDPOINT");
    const QCommandLineOption offline("offline", "do not connect to or start an engine");
    parser.addOptions({screenshot, engine, offline});
    parser.process(application);
    if (parser.positionalArguments().size() > 1) {
        std::fprintf(stderr, "meshbench: one file at a time\n");
        return 2;
    }

    applyTheme(application, QSettings().value("view/theme").toString() == themeName(Theme::Dark) ? Theme::Dark
                                                                                                  : Theme::Light);
    std::unique_ptr<EngineClient> client;
    if (!parser.isSet(offline)) {
        client = std::make_unique<EngineClient>();
        if (parser.isSet(engine))
            client->connectTo(parser.value(engine));
        else
            client->startLocalEngine();
    }
    MainWindow window(client.get());
    window.show();
    int status = 0;
    if (!parser.positionalArguments().isEmpty() && !window.openFile(parser.positionalArguments().front()))
        status = parser.isSet(screenshot) ? 1 : 0;
    if (parser.isSet(screenshot)) {
        // Long enough for plans and charts to settle; then every area is saved and the app ends.
        QTimer::singleShot(1500, &window, [&] {
            QString error;
            if (!window.saveScreenshots(parser.value(screenshot), &error)) {
                std::fprintf(stderr, "meshbench: %s\n", qPrintable(error));
                status = 1;
            } else {
                std::printf("screenshots in %s\n", qPrintable(parser.value(screenshot)));
            }
            application.quit();
        });
    }
    const int result = application.exec();
    return status != 0 ? status : result;
}
