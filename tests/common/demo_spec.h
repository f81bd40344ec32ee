#pragma once
// The demo job (resources/jobs/demo.json) as a parsed spec, for the tests that plan or check it;
// the test's binary defines MESHBENCH_SOURCE_DIR.

#include "plan/job_spec.h"

#include <QFile>
#include <QtGlobal>

namespace meshbench::testing {

inline plan::JobSpec demoSpec()
{
    QFile f(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json"));
    if (!f.open(QIODevice::ReadOnly))
        qFatal("resources/jobs/demo.json is missing");
    const plan::LoadResult loaded = plan::parseJobSpec(f.readAll().toStdString());
    if (!loaded.valid())
        qFatal("demo.json does not load");
    return *loaded.spec;
}

}  // namespace meshbench::testing
