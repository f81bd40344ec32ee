// wire/curve_keys: Z85 keys checked (length, alphabet, 32-bit groups); key files and the allow-list
// read as written, with their comments, each malformed line named with its file and
// line; a secret file refused where a public key belongs, and when others may read it; the key
// folder taken from XDG_CONFIG_HOME; and which endpoints count as this machine's alone.

#include "wire/curve_keys.h"

#include <QtTest>

#include <fstream>

using namespace meshbench;

namespace {

// Keys as ZeroMQ's RFC 32 test vector and zmq_curve_keypair give them.
const std::string kPublic = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
const std::string kSecret = "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs";
const std::string kOther = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";

std::string problemOf(const std::filesystem::path& file, const std::function<void(const std::filesystem::path&)>& read)
{
    try {
        read(file);
    } catch (const wire::KeyError& e) {
        return e.what();
    }
    return {};
}

}  // namespace

class TestCurveKeys : public QObject {
    Q_OBJECT

private slots:
    void z85KeysAreChecked()
    {
        QVERIFY(wire::z85KeyProblem(kPublic).empty());
        QVERIFY(wire::z85KeyProblem(kOther).empty());
        QVERIFY(wire::z85KeyProblem(kPublic.substr(1)).find("39 characters; a key has 40") != std::string::npos);
        QVERIFY(wire::z85KeyProblem(kPublic + "x").find("41 characters") != std::string::npos);
        QVERIFY(wire::z85KeyProblem("Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hI\"").find("character 40") !=
                std::string::npos);
        // "%nSc0" is 2^32 - 1, the most five characters may say; so no key begins with '#'.
        QVERIFY(wire::z85KeyProblem("%nSc0" + kPublic.substr(5)).empty());
        QVERIFY(wire::z85KeyProblem("%nSc1" + kPublic.substr(5)).find("characters 1-5 encode more than 32 bits") !=
                std::string::npos);
        QVERIFY(!wire::z85KeyProblem("#" + kPublic.substr(1)).empty());
    }

    void filesReadAsWritten()
    {
        QTemporaryDir dir;
        const std::filesystem::path pub = dir.filePath("x.key").toStdString();
        const std::filesystem::path secret = dir.filePath("x.key_secret").toStdString();
        std::ofstream(pub) << wire::publicKeyText("x", kPublic);
        std::ofstream(secret) << wire::keyPairText("x", {kPublic, kSecret});
        std::filesystem::permissions(secret, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
        QCOMPARE(wire::readPublicKey(pub), kPublic);
        const wire::KeyPair pair = wire::readKeyPair(secret);
        QCOMPARE(pair.publicKey, kPublic);
        QCOMPARE(pair.secretKey, kSecret);
        QCOMPARE(wire::publicKeyArgument(kPublic), kPublic);
        QCOMPARE(wire::publicKeyArgument(pub.string()), kPublic);

        // A pasted bare key, comments after keys and of their own, an unquoted labelled key.
        const std::filesystem::path list = dir.filePath("allowed_clients").toStdString();
        std::ofstream(list) << wire::allowListHeader() << "\n  " << kPublic << "   # laptop\n"
                            << kOther << "\n#" << kPublic << " (commented out)\n"
                            << "public-key = " << kSecret << "  # unquoted\n";
        QCOMPARE(wire::readAllowList(list), (std::vector<std::string>{kPublic, kOther, kSecret}));
        const std::filesystem::path bare = dir.filePath("bare.key").toStdString();
        std::ofstream(bare) << kOther << "\n";
        QCOMPARE(wire::readPublicKey(bare), kOther);
    }

    void malformedFilesAreNamedWithTheirLine()
    {
        QTemporaryDir dir;
        const std::filesystem::path file = dir.filePath("bad").toStdString();
        auto allowListProblem = [&](const std::string& text) {
            std::ofstream(file) << text;
            return problemOf(file, [](const std::filesystem::path& f) { wire::readAllowList(f); });
        };
        const std::string where = file.string() + ", line 2: ";
        QCOMPARE(allowListProblem("# ok\n" + kPublic + " trailing\n"),
                 where + "'trailing' follows the key; one key a line (a comment begins with #)");
        QVERIFY(allowListProblem("\nhello\n").find(where + "'hello' is neither a key") == 0);
        QVERIFY(allowListProblem("\npublic-key " + kPublic + "\n").find(where + "write public-key = \"KEY\"") == 0);
        QVERIFY(allowListProblem("\npublic-key = \"" + kPublic + "\n").find("closing quote is missing") !=
                std::string::npos);
        QVERIFY(allowListProblem("\npublic-key = \"abc\"\n").find(where + "public-key 'abc' is not a key: it has 3") ==
                0);
        QVERIFY(allowListProblem("\nsecret-key = \"" + kSecret + "\"\n").find("holds a secret key (line 2)") !=
                std::string::npos);
        QVERIFY(allowListProblem("bad \xff byte\n").find("'bad \\xFF byte'") != std::string::npos);
        QVERIFY(allowListProblem("# nobody yet\n").empty());

        auto publicProblem = [&](const std::string& text) {
            std::ofstream(file) << text;
            return problemOf(file, [](const std::filesystem::path& f) { wire::readPublicKey(f); });
        };
        QVERIFY(publicProblem("# empty\n").find("holds no key") != std::string::npos);
        QVERIFY(publicProblem(kPublic + "\n" + kOther + "\n").find("more than one key (lines 1 and 2)") !=
                std::string::npos);

        auto pairProblem = [&](const std::string& text, std::filesystem::perms mode) {
            std::ofstream(file) << text;
            std::filesystem::permissions(file, mode);
            return problemOf(file, [](const std::filesystem::path& f) { wire::readKeyPair(f); });
        };
        using std::filesystem::perms;
        const perms mine = perms::owner_read | perms::owner_write;
        QVERIFY(pairProblem(wire::publicKeyText("x", kPublic), mine).find("holds no secret-key line") !=
                std::string::npos);
        QVERIFY(pairProblem("secret-key = \"" + kSecret + "\"\n", mine).find("without its public-key line") !=
                std::string::npos);
        QVERIFY(pairProblem(wire::keyPairText("x", {kPublic, kSecret}), mine | perms::others_read)
                    .find("other users may read it (mode 0604); make it yours alone: chmod 600") != std::string::npos);

        const std::string missing = problemOf(dir.filePath("none").toStdString(),
                                              [](const std::filesystem::path& f) { wire::readPublicKey(f); });
        QVERIFY(missing.find("does not exist") != std::string::npos);
        QVERIFY(problemOf("not-a-key-nor-a-file", [](const std::filesystem::path& f) {
                    wire::publicKeyArgument(f.string());
                }).find("is neither a public key nor a key file") != std::string::npos);
    }

    void theKeyFolderFollowsXdgConfigHome()
    {
        const QByteArray saved = qgetenv("XDG_CONFIG_HOME");
        qputenv("XDG_CONFIG_HOME", "/srv/config");
        QCOMPARE(wire::keyDirectory(), std::filesystem::path("/srv/config/meshbench"));
        QCOMPARE(wire::secretKeyPath(wire::keyDirectory(), "server"),
                 std::filesystem::path("/srv/config/meshbench/server.key_secret"));
        // A relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
        qputenv("XDG_CONFIG_HOME", "relative");
        QCOMPARE(wire::keyDirectory(), std::filesystem::path(qgetenv("HOME").toStdString()) / ".config" / "meshbench");
        qputenv("XDG_CONFIG_HOME", saved);
    }
};

QTEST_GUILESS_MAIN(TestCurveKeys)
#include "tst_curve_keys.moc"
