// kernels' caching allocator over a fake device (host memory with a capacity): sizes rounded as
// documented, blocks reused without device calls, the figures of a memory report, and an
// out-of-memory that empties the cache before it gives up with the sizes named.

#include "kernels/backend.h"
#include "kernels/caching_allocator.h"

#include <QtTest>

#include <cstdlib>
#include <set>

using meshbench::kernels::CachingAllocator;

namespace {

// Host memory standing in for a device of `capacity` bytes.
struct FakeDevice {
    std::size_t capacity = std::size_t(64) << 20;
    std::size_t used = 0;
    int allocations = 0;
    int frees = 0;
    std::map<void*, std::size_t> live;

    CachingAllocator allocator()
    {
        return CachingAllocator(
            [this](std::size_t bytes) -> void* {
                if (used + bytes > capacity)
                    return nullptr;
                void* p = std::malloc(bytes);
                used += bytes;
                live[p] = bytes;
                ++allocations;
                return p;
            },
            [this](void* p) {
                used -= live.at(p);
                live.erase(p);
                std::free(p);
                ++frees;
            });
    }
};

constexpr std::size_t kMiB = std::size_t(1) << 20;

}  // namespace

class TestCachingAllocator : public QObject {
    Q_OBJECT

private slots:
    void sizesAreRounded()
    {
        QCOMPARE(CachingAllocator::roundedSize(1), std::size_t(512));
        QCOMPARE(CachingAllocator::roundedSize(512), std::size_t(512));
        QCOMPARE(CachingAllocator::roundedSize(513), std::size_t(1024));
        QCOMPARE(CachingAllocator::roundedSize(kMiB - 1), kMiB);
        QCOMPARE(CachingAllocator::roundedSize(kMiB), 2 * kMiB);
        QCOMPARE(CachingAllocator::roundedSize(3 * kMiB + 1), 4 * kMiB);
    }

    void aStepsWorthOfBuffersCostsNoDeviceCallsTheSecondTime()
    {
        FakeDevice device;
        {
            CachingAllocator cache = device.allocator();
            const std::vector<std::size_t> sizes{100, 4000, 3 * kMiB, 700, 5 * kMiB + 3};
            for (int step = 0; step < 3; ++step) {
                std::vector<void*> blocks;
                blocks.reserve(sizes.size());
                for (std::size_t s : sizes)
                    blocks.push_back(cache.allocate(s));
                QCOMPARE(std::set<void*>(blocks.begin(), blocks.end()).size(), sizes.size());
                for (void* b : blocks)
                    cache.release(b);
            }
            QCOMPARE(device.allocations, int(sizes.size()));  // the first step's only
            const CachingAllocator::Stats stats = cache.stats();
            QCOMPARE(stats.deviceAllocations, std::int64_t(sizes.size()));
            QCOMPARE(stats.cacheHits, std::int64_t(2 * sizes.size()));
            QCOMPARE(stats.inUseBytes, std::int64_t(0));
            // 512 + 4096 + 4 MiB + 1024 + 6 MiB, worked out from the rounding rule.
            const std::int64_t reserved = 512 + 4096 + 4 * std::int64_t(kMiB) + 1024 + 6 * std::int64_t(kMiB);
            QCOMPARE(stats.reservedBytes, reserved);
            QCOMPARE(stats.peakInUseBytes, reserved);
            QCOMPARE(stats.peakReservedBytes, reserved);
            QCOMPARE(std::int64_t(device.used), reserved);
        }
        QCOMPARE(device.frees, device.allocations);  // all given back at the end
        QCOMPARE(device.used, std::size_t(0));
    }

    void aCachedBlockServesOnlyRequestsOfAtLeastHalfItsSize()
    {
        FakeDevice device;
        CachingAllocator cache = device.allocator();
        void* big = cache.allocate(8 * kMiB);
        cache.release(big);
        void* small = cache.allocate(2 * kMiB);  // 8 MiB > 2 x 2 MiB: a new block
        QVERIFY(small != big);
        void* half = cache.allocate(4 * kMiB + 1);  // rounds to 6 MiB; 8 <= 12: the cached one
        QCOMPARE(half, big);
        QCOMPARE(cache.stats().inUseBytes, std::int64_t(10 * kMiB));
        cache.release(small);
        cache.release(half);
        QVERIFY_THROWS_EXCEPTION(meshbench::kernels::KernelError, cache.release(small));
    }

    void outOfMemoryEmptiesTheCacheThenNamesTheSizes()
    {
        FakeDevice device;
        device.capacity = 10 * kMiB;
        CachingAllocator cache = device.allocator();
        void* a = cache.allocate(4 * kMiB);
        void* b = cache.allocate(4 * kMiB);
        cache.release(b);
        // 8 MiB reserved; 6 MiB more fits only once the cached 4 MiB is returned (it cannot serve
        // a 6 MiB block itself).
        void* c = cache.allocate(6 * kMiB);
        QVERIFY(c);
        QCOMPARE(cache.stats().reservedBytes, std::int64_t(10 * kMiB));
        try {
            cache.allocate(2 * kMiB);
            QFAIL("a full device gave a block");
        } catch (const meshbench::kernels::KernelError& e) {
            const QString message = e.what();
            QVERIFY2(message.contains("out of device memory: a block of 2 MiB with 10 MiB in use"), e.what());
            QVERIFY2(message.contains("micro_batch_size"), e.what());
        }
        cache.release(a);
        cache.release(c);
        cache.emptyCache();
        QCOMPARE(device.used, std::size_t(0));
        QCOMPARE(cache.stats().reservedBytes, std::int64_t(0));
        QCOMPARE(cache.allocate(0), nullptr);
    }
};

QTEST_APPLESS_MAIN(TestCachingAllocator)
#include "tst_caching_allocator.moc"
