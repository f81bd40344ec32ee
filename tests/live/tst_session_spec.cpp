// Which spec a stored session ran (live::sessionSpecAsRun), the rule the engine's replay, the
// Monitor and the Sessions area share: the demo's layout over its 8 ranks, one device for a
// session of one rank, and a stored spec that no longer validates refused with the session named.

#include "live/session_spec.h"

#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

using namespace meshbench;

namespace {

std::string demoSpecText()
{
    QFile file(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json"));
    if (!file.open(QIODevice::ReadOnly))
        qFatal("demo.json missing");
    return file.readAll().toStdString();
}

// A session whose header stores `spec` and `ranks` ranks.
std::string writeSession(const QTemporaryDir& dir, const char* name, const std::string& spec, int ranks)
{
    store::SessionHeader header;
    header.name = name;
    header.jobSpec = spec;
    for (int r = 0; r < ranks; ++r)
        header.ranks.push_back({r, 0, 0, 0, 0, 0, 0, "localhost", 100 + r});
    std::string path = dir.filePath(QString::fromLatin1(name) + ".meshbench").toStdString();
    store::SessionWriter writer(path, header);
    writer.setOutcome({store::Outcome::Completed, "", -1, 1});
    return path;
}

}  // namespace

class TestSessionSpec : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void layoutAsRun()
    {
        QTemporaryDir dir;
        const std::string spec = demoSpecText();
        const plan::JobSpec mesh = live::sessionSpecAsRun(store::SessionReader(writeSession(dir, "mesh", spec, 8)));
        QCOMPARE(mesh.parallel.worldSize(), 8);
        QCOMPARE(mesh.parallel.pp, 2);
        // One rank of an 8-rank layout: a --one-device run of the same job.
        const plan::JobSpec one = live::sessionSpecAsRun(store::SessionReader(writeSession(dir, "one", spec, 1)));
        QCOMPARE(one.parallel.worldSize(), 1);
        QCOMPARE(one.parallel.globalBatch(), mesh.parallel.globalBatch());
    }

    void aSpecThatNoLongerValidatesIsRefusedByName()
    {
        QTemporaryDir dir;
        std::string spec = demoSpecText();
        spec.replace(spec.find("\"tp\": 2"), 7, "\"tp\": 3");  // 12 ranks on 8 devices, 4 heads over 3
        const std::string path = writeSession(dir, "damaged", spec, 8);
        try {
            live::sessionSpecAsRun(store::SessionReader(path), path);
            QFAIL("a spec that does not validate was taken");
        } catch (const store::StoreError& e) {
            // The session, and the spec's first problem as the job spec's own check words it.
            const plan::SpecError first = plan::parseJobSpec(spec).errors.front();
            const QString what = QString::fromUtf8(e.what());
            QVERIFY2(what.startsWith(QString::fromStdString(path + ": ")) &&
                         what.contains("no longer passes validation") &&
                         what.contains(QString::fromStdString(first.path + ": " + first.message)),
                     qPrintable(what));
        }
    }
};

QTEST_APPLESS_MAIN(TestSessionSpec)
#include "tst_session_spec.moc"
