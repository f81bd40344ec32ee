#include "client_keys.h"

namespace meshbench::app {

namespace {

// The argument, else the default file when it exists; empty when neither.
QString argumentOrFile(const QString& argument, const std::filesystem::path& file)
{
    std::error_code error;
    if (!argument.isEmpty() || !std::filesystem::exists(file, error))
        return argument;
    return QString::fromStdString(file.string());
}

}  // namespace

ClientKeysChoice chooseClientKeys(const QString& control, const QString& serverKey, const QString& clientKey)
{
    if (serverKey.isEmpty() && clientKey.isEmpty() && wire::isPrivateEndpoint(control.toStdString()))
        return {};
    const std::filesystem::path dir = wire::keyDirectory();
    const QString server = argumentOrFile(serverKey, wire::publicKeyPath(dir, wire::kServerKeyName));
    const QString client = argumentOrFile(clientKey, wire::secretKeyPath(dir, wire::kClientKeyName));
    const QString serverKeyHint = QStringLiteral("give the engine's public key with --server-key FILE (the server.key "
                                                 "that `meshbench-engine keys` wrote on the engine's host)");
    if (server.isEmpty())
        return {std::nullopt,
                serverKey.isEmpty() && !clientKey.isEmpty() && wire::isPrivateEndpoint(control.toStdString())
                    ? QStringLiteral("--client-key goes with the engine's key: ") + serverKeyHint
                    : QStringLiteral("%1 is open to other users, so the engine serves it with CURVE keys "
                                     "only: %2")
                          .arg(control, serverKeyHint)};
    if (client.isEmpty())
        return {std::nullopt,
                QStringLiteral("the engine at %1 lets in only the client keys it allows, and this workbench has none: "
                               "run `meshbench-engine keys` here (it writes %2), then on the engine's host "
                               "`meshbench-engine keys --allow client.key`; or give --client-key FILE")
                    .arg(control, QString::fromStdString(wire::secretKeyPath(dir, wire::kClientKeyName).string()))};
    try {
        wire::ClientKeys keys;
        keys.serverKey = wire::publicKeyArgument(server.toStdString());
        keys.client = wire::readKeyPair(client.toStdString());
        return {std::move(keys), {}};
    } catch (const wire::KeyError& e) {
        return {std::nullopt, QString::fromStdString(e.what())};
    }
}

}  // namespace meshbench::app
