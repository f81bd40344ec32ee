#pragma once
// Runs one of our executables as a user would and collects what it said.

#include <QByteArray>
#include <QElapsedTimer>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QtGlobal>

struct ProcessRun {
    int exitCode = -1;  // -100 when the process crashed: a crash fails whatever the test expected
    QString out;
    QString err;
};

// What a run left behind, bytes as written, for tests that judge the output's encoding and the
// run's time themselves (the fuzz harnesses): a run past its limit is killed and reported.
struct ProcessBytes {
    int exitCode = -1;  // -1 when it did not start, -100 when it crashed (or was killed for its time)
    bool timedOut = false;
    qint64 elapsedMs = 0;
    QByteArray out;
    QByteArray err;
};

inline ProcessBytes runProcessBytes(const QString& program, const QStringList& args, int timeoutMs)
{
    QProcess process;
    QElapsedTimer clock;
    clock.start();
    process.start(program, args);
    ProcessBytes run;
    if (!process.waitForStarted(-1)) {
        run.err = process.errorString().toUtf8();
        return run;
    }
    if (!process.waitForFinished(timeoutMs)) {
        run.timedOut = process.state() != QProcess::NotRunning;
        process.kill();
        process.waitForFinished(-1);
    }
    run.elapsedMs = clock.elapsed();
    run.exitCode = process.exitStatus() == QProcess::NormalExit && !run.timedOut ? process.exitCode() : -100;
    run.out = process.readAllStandardOutput();
    run.err = process.readAllStandardError();
    return run;
}

inline ProcessRun runProcess(const QString& program, const QStringList& args, int timeoutMs = 300000)
{
    const ProcessBytes bytes = runProcessBytes(program, args, timeoutMs);
    if (bytes.timedOut)
        qFatal("%s did not finish", qPrintable(program));
    return {bytes.exitCode, QString::fromUtf8(bytes.out), QString::fromUtf8(bytes.err)};
}
