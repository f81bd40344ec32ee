#pragma once
// Runs one of our executables as a user would and collects what it said.

#include <QProcess>
#include <QString>
#include <QStringList>
#include <QtGlobal>

struct ProcessRun {
    int exitCode = -1;   // -100 when the process crashed: a crash fails whatever the test expected
    QString out;
    QString err;
};

inline ProcessRun runProcess(const QString& program, const QStringList& args, int timeoutMs = 300000)
{
    QProcess process;
    process.start(program, args);
    if (!process.waitForFinished(timeoutMs))
        qFatal("%s did not finish", qPrintable(program));
    ProcessRun run;
    run.exitCode = process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -100;
    run.out = QString::fromUtf8(process.readAllStandardOutput());
    run.err = QString::fromUtf8(process.readAllStandardError());
    return run;
}
