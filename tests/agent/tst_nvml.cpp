// NVML loaded at run time: the driver's library where there is one (none on the build machines),
// a fake with fixed figures (fake_nvml.cpp), a fake whose initialisation fails, a library lacking
// NVML's entry points and a path that does not exist. Never an exception, always a reason.

#include "agent/telemetry/nvml.h"
#include "agent/telemetry/telemetry_sender.h"

#include <QtTest>

#include <dlfcn.h>

using namespace meshbench;
using agent::GpuSample;
using agent::Nvml;

namespace {

constexpr std::int64_t kGiB = std::int64_t(1) << 30;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The fake's own count of initialisations not yet shut down. The handle taken here keeps the fake
// loaded while Nvml objects load and unload it, so the count survives them.
int fakeInitialised()
{
    static void* fake = dlopen(MESHBENCH_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
    static auto initialised = fake ? reinterpret_cast<int (*)()>(dlsym(fake, "fakeNvmlInitialised")) : nullptr;
    if (!initialised)
        qFatal("cannot load %s: %s", MESHBENCH_FAKE_NVML, dlerror());
    return initialised();
}

}  // namespace

class TestNvml : public QObject {
    Q_OBJECT

private slots:
    void driverLibrary()
    {
        const Nvml& nvml = Nvml::process();
        if (nvml.available()) {  // a GPU machine: the driver's figures, whatever they are
            QVERIFY(nvml.unavailableReason().empty());
            const std::vector<GpuSample> gpus = nvml.sample();
            QVERIFY(!gpus.empty());
            for (std::size_t i = 0; i < gpus.size(); ++i)
                QCOMPARE(gpus[i].index, int(i));
            return;
        }
        QVERIFY2(contains(nvml.unavailableReason(), "libnvidia-ml.so.1"), nvml.unavailableReason().c_str());
        QVERIFY(nvml.sample().empty());
    }

    void nodeSampleStartsWithTheHost()
    {
        const std::vector<wire::NodeSampleRecord> samples = agent::sampleNode();
        const std::vector<GpuSample> gpus = Nvml::process().sample();
        QCOMPARE(samples.size(), 1 + gpus.size());
        const wire::NodeSampleRecord& host = samples.front();
        QCOMPARE(host.device, -1);
        QVERIFY(host.hostMemoryTotalBytes > 0);
        QVERIFY(host.hostMemoryUsedBytes > 0 && host.hostMemoryUsedBytes <= host.hostMemoryTotalBytes);
        QCOMPARE(host.deviceMemoryTotalBytes, std::int64_t(-1));
        for (std::size_t i = 1; i < samples.size(); ++i) {
            QCOMPARE(samples[i].timeNs, host.timeNs);
            QCOMPARE(samples[i].host, host.host);
            QCOMPARE(samples[i].device, gpus[i - 1].index);
            QCOMPARE(samples[i].hostMemoryTotalBytes, std::int64_t(-1));  // the host's figures travel once
            QCOMPARE(samples[i].hostMemoryUsedBytes, std::int64_t(-1));
        }
    }

    void fakeDriverFigures()
    {
        {
            const Nvml nvml(MESHBENCH_FAKE_NVML);
            QVERIFY2(nvml.available(), nvml.unavailableReason().c_str());
            QVERIFY(nvml.unavailableReason().empty());
            QCOMPARE(fakeInitialised(), 1);
            const std::vector<GpuSample> gpus = nvml.sample();
            QCOMPARE(gpus.size(), std::size_t(2));
            QCOMPARE(gpus[0].index, 0);
            QCOMPARE(gpus[0].memoryTotalBytes, 80 * kGiB);
            QCOMPARE(gpus[0].memoryUsedBytes, 12 * kGiB);
            QCOMPARE(gpus[0].utilization, 0.37f);
            QCOMPARE(gpus[1].index, 1);
            QCOMPARE(gpus[1].memoryTotalBytes, 80 * kGiB);
            QCOMPARE(gpus[1].memoryUsedBytes, 3 * kGiB);
            QCOMPARE(gpus[1].utilization, -1.0f);  // its utilisation query fails
        }
        QCOMPARE(fakeInitialised(), 0);  // the destructor shut NVML down
    }

    void failingInitialisation()
    {
        qputenv("FAKE_NVML_INIT_FAILS", "1");
        const auto restore = qScopeGuard([] { qunsetenv("FAKE_NVML_INIT_FAILS"); });
        const Nvml nvml(MESHBENCH_FAKE_NVML);
        QVERIFY(!nvml.available());
        const std::string& reason = nvml.unavailableReason();
        QVERIFY2(contains(reason, "nvmlInit_v2 failed"), reason.c_str());
        QVERIFY2(contains(reason, "fake: driver not loaded"), reason.c_str());
        QVERIFY2(contains(reason, MESHBENCH_FAKE_NVML), reason.c_str());
        QVERIFY(nvml.sample().empty());
        QCOMPARE(fakeInitialised(), 0);
    }

    void libraryWithoutNvml()
    {
        const Nvml nvml("libc.so.6");  // loads, but has none of NVML's entry points
        QVERIFY(!nvml.available());
        QVERIFY2(contains(nvml.unavailableReason(), "libc.so.6 has no nvmlInit_v2"), nvml.unavailableReason().c_str());
        QVERIFY(nvml.sample().empty());
    }

    void missingLibrary()
    {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string path = dir.filePath("libnvidia-ml.so.1").toStdString();  // never created
        const Nvml nvml(path);
        QVERIFY(!nvml.available());
        QVERIFY2(contains(nvml.unavailableReason(), path), nvml.unavailableReason().c_str());
        QVERIFY(nvml.sample().empty());
    }
};

QTEST_APPLESS_MAIN(TestNvml)
#include "tst_nvml.moc"
