#pragma once
// The job being designed: its JSON is the one source of truth. Every change re-validates it and,
// when the layout is valid, re-plans it through engine/plan in-process. What this build's
// meshbench-agent would refuse (plan::agentCanRun) is an error too, on its key: such a layout is
// still planned, so that its costs can be read, but it is not launchable.

#include "plan/job_spec.h"
#include "plan/planner.h"

#include <nlohmann/json.hpp>

#include <QList>
#include <QObject>
#include <QString>

#include <memory>
#include <optional>

namespace meshbench::app {

// One validation error: the JSON path it concerns ("parallel.tp"; empty for the whole document).
struct FieldError {
    QString path;
    QString message;
    bool operator==(const FieldError&) const = default;
};

class JobDocument : public QObject {
    Q_OBJECT
public:
    explicit JobDocument(QObject* parent = nullptr);
    ~JobDocument() override;

    // File errors (unreadable, not JSON) come back in `error` and leave the document unchanged.
    bool loadFile(const QString& path, QString* error = nullptr);
    bool saveFile(const QString& path, QString* error = nullptr) const;
    QString fileName() const { return m_fileName; }

    const nlohmann::json& json() const { return m_json; }
    QByteArray toJsonText() const;
    void setJson(nlohmann::json document);

    // The value at a dotted path ("model.moe.experts"); null when absent.
    nlohmann::json value(const QString& path) const;
    // Sets the value at a dotted path, creating objects on the way; a null value removes the key.
    void set(const QString& path, const nlohmann::json& value);
    // Applies an RFC 7396 merge patch in one change (one re-plan).
    void merge(const nlohmann::json& patch);

    // The parsed spec: present when the document is structurally sound, even with layout errors.
    const std::optional<plan::JobSpec>& spec() const { return m_spec; }
    // The plan; null while the spec or its layout has errors (not for the agent's refusals alone).
    const plan::Plan* plan() const { return m_plan.get(); }
    // When the spec carries a calibration (cluster.calibration): the same job planned from the
    // device table alone, to show beside the calibrated plan. Null otherwise.
    const plan::Plan* datasheetPlan() const { return m_datasheetPlan.get(); }
    // Fits the device's rates to stored sessions (plan::calibrate) and puts them in
    // cluster.calibration, one re-plan. Returns false with the reason, leaving the document as it
    // was, when a session cannot be read or holds nothing to fit; `report` gets calibrate's lines.
    bool calibrateFrom(const QStringList& sessions, QStringList* report, QString* error);
    // Validation errors, then what the agent refuses.
    const QList<FieldError>& errors() const { return m_errors; }
    // Planned and free of errors: the agents would run it.
    bool launchable() const { return m_plan && m_errors.isEmpty(); }
    // Errors whose path is `path` exactly.
    QStringList errorsAt(const QString& path) const;
    // Wall time of the last validate + plan, milliseconds.
    double lastReplanMs() const { return m_lastReplanMs; }

signals:
    void specChanged();
    void planChanged(const meshbench::plan::Plan* plan);
    void errorsChanged(const QList<meshbench::app::FieldError>& errors);

private:
    void replan();

    nlohmann::json m_json;
    QString m_fileName;
    std::optional<plan::JobSpec> m_spec;
    std::unique_ptr<plan::Plan> m_plan;
    std::unique_ptr<plan::Plan> m_datasheetPlan;
    QList<FieldError> m_errors;
    double m_lastReplanMs = 0;
};

// "parallel.tp" -> "/parallel/tp".
nlohmann::json::json_pointer pointerOf(const QString& path);

}  // namespace meshbench::app
