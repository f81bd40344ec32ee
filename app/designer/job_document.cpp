#include "job_document.h"

#include "live/session_measurements.h"
#include "plan/calibration.h"
#include "wire/text.h"

#include <QElapsedTimer>
#include <QFile>
#include <QSaveFile>

namespace meshbench::app {

nlohmann::json::json_pointer pointerOf(const QString& path)
{
    nlohmann::json::json_pointer pointer;
    for (const QString& key : path.split(u'.', Qt::SkipEmptyParts))
        pointer /= key.toStdString();
    return pointer;
}

JobDocument::JobDocument(QObject* parent) : QObject(parent), m_json(nlohmann::json::object()) { replan(); }

JobDocument::~JobDocument() = default;

bool JobDocument::loadFile(const QString& path, QString* error)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) {
        if (error)
            *error = file.errorString();
        return false;
    }
    // The engine's own reading of the text: a duplicated key or a syntax error is refused with where it is.
    std::vector<wire::JsonProblem> problems;
    std::optional<nlohmann::json> document = wire::parseStrictJson(file.readAll().toStdString(), problems);
    if (!document || !document->is_object()) {
        if (error)
            *error = !document
                         ? QStringLiteral("%1: %2%3")
                               .arg(path,
                                    QString::fromStdString(
                                        problems.front().path.empty() ? std::string() : problems.front().path + ": "),
                                    QString::fromStdString(problems.front().message))
                         : QStringLiteral("%1 is not a JSON object").arg(path);
        return false;
    }
    m_fileName = path;
    setJson(std::move(*document));
    return true;
}

bool JobDocument::saveFile(const QString& path, QString* error) const
{
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(toJsonText()) < 0 || !file.commit()) {
        if (error)
            *error = file.errorString();
        return false;
    }
    return true;
}

QByteArray JobDocument::toJsonText() const { return QByteArray::fromStdString(wire::jsonText(m_json, 2) + "\n"); }

void JobDocument::setJson(nlohmann::json document)
{
    m_json = std::move(document);
    replan();
}

nlohmann::json JobDocument::value(const QString& path) const
{
    const auto pointer = pointerOf(path);
    // contains() itself throws when a parent on the way is not an object.
    try {
        return m_json.contains(pointer) ? m_json.at(pointer) : nlohmann::json();
    } catch (const nlohmann::json::exception&) {
        return {};
    }
}

void JobDocument::set(const QString& path, const nlohmann::json& value)
{
    const auto pointer = pointerOf(path);
    try {
        if (!value.is_null())
            m_json[pointer] = value;
        else if (m_json.contains(pointer))
            m_json.at(pointer.parent_pointer()).erase(pointer.back());
    } catch (const nlohmann::json::exception&) {
        // A parent on the way is not an object ("model": 5): a merge patch replaces it.
        nlohmann::json patch = value;
        const QStringList keys = path.split(u'.', Qt::SkipEmptyParts);
        for (auto key = keys.rbegin(); key != keys.rend(); ++key)
            patch = nlohmann::json{{key->toStdString(), std::move(patch)}};
        m_json.merge_patch(patch);
    }
    replan();
}

void JobDocument::merge(const nlohmann::json& patch)
{
    m_json.merge_patch(patch);
    replan();
}

QStringList JobDocument::errorsAt(const QString& path) const
{
    QStringList out;
    for (const FieldError& e : m_errors)
        if (e.path == path)
            out << e.message;
    return out;
}

bool JobDocument::calibrateFrom(const QStringList& sessions, QStringList* report, QString* error)
{
    try {
        std::vector<plan::MeasuredRun> runs;
        for (const QString& path : sessions)
            runs.push_back(live::measureSession(path.toStdString()));
        const plan::CalibrationResult result = plan::calibrate(runs);
        if (report)
            for (const std::string& line : result.report)
                report->append(QString::fromStdString(line));
        set(QStringLiteral("cluster.calibration"), plan::toJson(result.calibration));
        return true;
    } catch (const std::exception& e) {
        if (error)
            *error = QString::fromStdString(e.what());
        return false;
    }
}

void JobDocument::replan()
{
    QElapsedTimer timer;
    timer.start();
    plan::LoadResult loaded = plan::loadJobSpec(m_json);
    QList<FieldError> errors;
    for (const plan::SpecError& e : loaded.errors)
        errors.append({QString::fromStdString(e.path), QString::fromStdString(e.message)});
    for (const plan::SpecError& e : loaded.refusals)
        errors.append({QString::fromStdString(e.path), QString::fromStdString(e.message)});
    m_spec = loaded.spec;
    // makePlan's precondition is a valid layout; never call it otherwise.
    m_plan = loaded.valid() ? std::make_unique<plan::Plan>(plan::makePlan(*loaded.spec)) : nullptr;
    m_datasheetPlan.reset();
    if (m_plan && !loaded.spec->cluster.calibration.empty()) {
        plan::JobSpec datasheet = *loaded.spec;
        datasheet.cluster.calibration = {};
        m_datasheetPlan = std::make_unique<plan::Plan>(plan::makePlan(datasheet));
    }
    m_lastReplanMs = double(timer.nsecsElapsed()) / 1e6;

    const bool errorsDiffer = errors != m_errors;
    m_errors = std::move(errors);
    emit specChanged();
    if (errorsDiffer)
        emit errorsChanged(m_errors);
    emit planChanged(m_plan.get());
}

}  // namespace meshbench::app
