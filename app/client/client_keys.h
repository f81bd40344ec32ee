#pragma once
// The CURVE keys the workbench offers an engine (the files are those of wire/curve_keys.h). The
// engine's public key is --server-key (a Z85 key or a public key file); the workbench's own pair is
// --client-key (the secret file of the pair). Each defaults to the file `meshbench-engine keys`
// wrote in the key folder, when there is one. An endpoint only this user can reach (an ipc socket
// in a private folder) goes without keys unless one is named, as the engine serves those without
// keys unless told --curve; every tcp:// endpoint, loopback too, needs them.

#include "wire/curve_keys.h"
#include "wire/endpoints.h"

#include <QString>

#include <optional>

namespace meshbench::app {

struct ClientKeysChoice {
    std::optional<wire::ClientKeys> keys;  // none: a plaintext connection
    QString error;                         // why the keys cannot be had, and what to do; empty when fine
};

ClientKeysChoice chooseClientKeys(const QString& control, const QString& serverKey, const QString& clientKey);

}  // namespace meshbench::app
