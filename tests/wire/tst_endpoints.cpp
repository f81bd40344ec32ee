// wire/endpoints: who can reach an endpoint (this machine; this user alone), the per-user socket
// folder made private and refused when it is not, and what a failed bind's errno means.

#include "wire/endpoints.h"

#include "common/other_user.h"

#include <QtTest>

#include <cerrno>

#include <sys/stat.h>
#include <unistd.h>

using namespace meshbench;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

unsigned modeOf(const std::filesystem::path& path)
{
    struct stat s {};
    if (::lstat(path.c_str(), &s) != 0)
        qFatal("cannot stat %s", path.c_str());
    return s.st_mode & 0777;
}

}  // namespace

class TestEndpoints : public QObject {
    Q_OBJECT

private slots:
    void localEndpoints()
    {
        for (const char* local : {"ipc:///tmp/x", "inproc://x", "tcp://127.0.0.1:5570", "tcp://localhost:5570",
                                  "tcp://[::1]:5570", "tcp://lo:5570"})
            QVERIFY2(wire::isLocalEndpoint(local), local);
        for (const char* network : {"tcp://0.0.0.0:5570", "tcp://*:5570", "tcp://10.250.77.1:5570", "tcp://eth0:5570",
                                    "tcp://[::]:5570", "tcp://login-node:5570"})
            QVERIFY2(!wire::isLocalEndpoint(network), network);
        QCOMPARE(wire::tcpHost("tcp://[::1]:5570"), std::string("[::1]"));
        QCOMPARE(wire::tcpHost("ipc:///x"), std::string());
    }

    // Issue 27, finding 2: only a socket no other user can connect to goes without keys.
    void privateEndpoints()
    {
        QTemporaryDir dir;  // mode 0700, ours
        const std::string inside = "ipc://" + dir.filePath("control").toStdString();
        QVERIFY(wire::isPrivateEndpoint(inside));
        QVERIFY(wire::isPrivateEndpoint("inproc://x"));
        for (const char* open :
             {"tcp://127.0.0.1:5570", "tcp://localhost:*", "ipc://@abstract-name", "ipc:///tmp/control"})
            QVERIFY2(!wire::isPrivateEndpoint(open), open);
        // The same folder opened to the group, or to others, is no longer private.
        for (const unsigned mode : {0750u, 0705u, 0777u}) {
            QCOMPARE(::chmod(dir.path().toUtf8().constData(), mode), 0);
            QVERIFY2(!wire::isPrivateEndpoint(inside), qPrintable(QString::number(mode, 8)));
        }
        QCOMPARE(::chmod(dir.path().toUtf8().constData(), 0700), 0);
        QVERIFY(wire::isPrivateEndpoint(inside));
        // A folder of ours that others may enter, inside one they may not: nobody else gets to it.
        const QString open = dir.filePath("open");
        QVERIFY(QDir().mkdir(open));
        QCOMPARE(::chmod(open.toUtf8().constData(), 0755), 0);
        const std::string deeper = "ipc://" + open.toStdString() + "/control";
        QVERIFY(wire::isPrivateEndpoint(deeper));
        QCOMPARE(::chmod(dir.path().toUtf8().constData(), 0755), 0);
        QVERIFY(!wire::isPrivateEndpoint(deeper));
        QCOMPARE(::chmod(dir.path().toUtf8().constData(), 0700), 0);
        // A folder that is not there is nobody's.
        QVERIFY(!wire::isPrivateEndpoint("ipc://" + dir.filePath("missing/control").toStdString()));
    }

    void runtimeDirectoryIsMadePrivate()
    {
        const QByteArray saved = qgetenv("XDG_RUNTIME_DIR");
        QTemporaryDir runtime;
        qputenv("XDG_RUNTIME_DIR", runtime.path().toUtf8());
        const std::filesystem::path made = wire::runtimeDirectory();
        QCOMPARE(QString::fromStdString(made.string()), runtime.filePath("meshbench"));
        QCOMPARE(modeOf(made), 0700u);
        QCOMPARE(wire::defaultControlEndpoint(), "ipc://" + made.string() + "/control");
        QVERIFY(wire::isPrivateEndpoint(wire::defaultControlEndpoint()));
        QCOMPARE(wire::runtimeDirectory(), made);  // found again as it is

        // Opened up by someone, it is refused with the fix, and not used.
        QCOMPARE(::chmod(made.c_str(), 0755), 0);
        try {
            (void)wire::runtimeDirectory();
            QFAIL("a socket folder others may enter was used");
        } catch (const wire::EndpointError& e) {
            QVERIFY2(contains(e.what(), "its mode lets other users in") && contains(e.what(), "remove it"), e.what());
        }
        std::filesystem::remove(made);

        // A link put there first is not followed.
        std::filesystem::create_directory_symlink(runtime.filePath("elsewhere").toStdString(), made);
        QVERIFY(std::filesystem::create_directory(runtime.filePath("elsewhere").toStdString()));
        try {
            (void)wire::runtimeDirectory();
            QFAIL("a link in place of the socket folder was followed");
        } catch (const wire::EndpointError& e) {
            QVERIFY2(contains(e.what(), "it is not a folder"), e.what());
        }
        std::filesystem::remove(made);

        // Another user's folder is refused (as root, with the test user as its owner).
        std::string why;
        if (const std::optional<OtherUser> user = otherTestUser(&why)) {
            QVERIFY(std::filesystem::create_directory(made));
            QCOMPARE(::chown(made.c_str(), user->uid, user->gid), 0);
            QCOMPARE(::chmod(made.c_str(), 0700), 0);
            try {
                (void)wire::runtimeDirectory();
                QFAIL("another user's socket folder was used");
            } catch (const wire::EndpointError& e) {
                QVERIFY2(contains(e.what(), "belongs to user " + std::to_string(user->uid)), e.what());
            }
        }

        // Without XDG_RUNTIME_DIR (or with a relative one), /tmp/meshbench-UID.
        qputenv("XDG_RUNTIME_DIR", "relative");
        QCOMPARE(wire::runtimeDirectory(), std::filesystem::path("/tmp/meshbench-" + std::to_string(::geteuid())));
        qputenv("XDG_RUNTIME_DIR", saved);
    }

    // Issue 27, finding 17: the errno's meaning, not one guess for every failure.
    void bindFailuresSayWhy()
    {
        const std::string low = wire::bindFailure(EACCES, "tcp://127.0.0.1:80");
        QVERIFY2(contains(low, "Permission denied: port 80 is below 1024, which only root may bind"), low.c_str());
        QVERIFY(!contains(low, "another"));
        const std::string folder = wire::bindFailure(EACCES, "ipc:///srv/control");
        QVERIFY2(contains(folder, "may not make a socket in that folder"), folder.c_str());
        const std::string taken = wire::bindFailure(EADDRINUSE, "tcp://127.0.0.1:5570");
        QVERIFY2(contains(taken, "Address already in use: another program (another engine?) serves there; stop it, "
                                 "or choose another port"),
                 taken.c_str());
        QVERIFY2(contains(wire::bindFailure(EADDRINUSE, "ipc:///x/control"), "choose another path"),
                 wire::bindFailure(EADDRINUSE, "ipc:///x/control").c_str());
        const std::string past = wire::bindFailure(EINVAL, "tcp://127.0.0.1:65536");
        QVERIFY2(contains(past, "port 65536 is past the last port, 65535"), past.c_str());
        const std::string absent = wire::bindFailure(EADDRNOTAVAIL, "tcp://192.0.2.1:5570");
        QVERIFY2(contains(absent, "no interface of this machine has that address"), absent.c_str());
        const std::string longPath = wire::bindFailure(ENAMETOOLONG, "ipc:///" + std::string(200, 'x'));
        QVERIFY2(contains(longPath, "at most 107 bytes"), longPath.c_str());
    }
};

QTEST_GUILESS_MAIN(TestEndpoints)
#include "tst_endpoints.moc"
