#include "job_form.h"

#include "job_document.h"

#include "plan/presets.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QRegularExpression>
#include <QScrollArea>
#include <QScrollBar>
#include <QVBoxLayout>

#include <cmath>

namespace meshbench::app {
namespace {

const QString kCustom = QStringLiteral("custom");

// A red that reads on light and dark window colours alike.
QColor errorColor() { return QColor(0xd6, 0x27, 0x28); }

// A hidden, wrapping label in the error colour: a field's (or the whole form's) message.
QLabel* newErrorLabel()
{
    auto* label = new QLabel;
    label->setWordWrap(true);
    QPalette pal = label->palette();
    pal.setColor(QPalette::WindowText, errorColor());
    label->setPalette(pal);
    label->hide();
    return label;
}

QStringList toQStrings(const std::vector<std::string_view>& names)
{
    QStringList out;
    for (std::string_view n : names)
        out << QString::fromUtf8(n.data(), qsizetype(n.size()));
    return out;
}

QString jsonToText(const nlohmann::json& v)
{
    if (v.is_string())
        return QString::fromStdString(v.get<std::string>());
    if (v.is_number_integer() || v.is_number_unsigned())
        return QString::fromStdString(v.dump());
    if (v.is_number_float())
        return QString::number(v.get<double>(), 'g', 12);
    if (v.is_boolean())
        return v.get<bool>() ? QStringLiteral("true") : QStringLiteral("false");
    return v.is_null() ? QString() : QString::fromStdString(v.dump());
}

}  // namespace

JobForm::JobForm(JobDocument* document, QWidget* parent) : QWidget(parent), m_document(document)
{
    auto* content = new QWidget;
    auto* column = new QVBoxLayout(content);
    m_general = newErrorLabel();
    column->addWidget(m_general);

    auto section = [column](const QString& title) {
        auto* box = new QGroupBox(title);
        auto* form = new QFormLayout(box);
        form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
        column->addWidget(box);
        return form;
    };

    QFormLayout* model = section(tr("Model"));
    addField(model, tr("Layers"), "model.layers", Kind::Integer);
    addField(model, tr("Hidden"), "model.hidden", Kind::Integer);
    addField(model, tr("Heads"), "model.heads", Kind::Integer);
    addField(model, tr("KV heads"), "model.kv_heads", Kind::Integer);
    addField(model, tr("FFN hidden"), "model.ffn_hidden", Kind::Integer);
    addField(model, tr("Vocabulary"), "model.vocab", Kind::Integer);
    addField(model, tr("Sequence length"), "model.seq_len", Kind::Integer);
    addField(model, tr("Norm"), "model.norm", Kind::Choice, {"layernorm", "rmsnorm"});
    addField(model, tr("Activation"), "model.activation", Kind::Choice, {"gelu", "swiglu"});
    addField(model, tr("MoE experts"), "model.moe.experts", Kind::Integer, {}, tr("Empty for a dense model"));
    addField(model, tr("Top-k"), "model.moe.top_k", Kind::Integer);
    addField(model, tr("Expert FFN hidden"), "model.moe.moe_ffn_hidden", Kind::Integer);
    addField(model, tr("Capacity factor"), "model.moe.capacity_factor", Kind::Number);
    addField(model, tr("Aux-loss coefficient"), "model.moe.aux_loss_coef", Kind::Number);
    addField(model, tr("MoE every n layers"), "model.moe.every_n_layers", Kind::Integer);

    QFormLayout* parallel = section(tr("Parallel layout"));
    addField(parallel, tr("Data parallel (dp)"), "parallel.dp", Kind::Integer);
    addField(parallel, tr("Pipeline parallel (pp)"), "parallel.pp", Kind::Integer);
    addField(parallel, tr("Tensor parallel (tp)"), "parallel.tp", Kind::Integer);
    addField(parallel, tr("Expert parallel (ep)"), "parallel.ep", Kind::Integer);
    addField(parallel, tr("ZeRO stage"), "parallel.zero", Kind::Integer);
    addField(parallel, tr("Schedule"), "parallel.schedule", Kind::Choice,
             {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev"});
    addField(parallel, tr("Virtual stages"), "parallel.virtual_stages", Kind::Integer);
    addField(parallel, tr("Micro-batches"), "parallel.microbatches", Kind::Integer);
    addField(parallel, tr("Micro-batch size"), "parallel.micro_batch_size", Kind::Integer);
    addField(parallel, tr("Sequence parallel"), "parallel.sequence_parallel", Kind::Flag);
    addField(parallel, tr("Recompute"), "parallel.recompute", Kind::Choice, {"none", "selective", "full"});

    QFormLayout* cluster = section(tr("Cluster"));
    addField(cluster, tr("Preset"), "cluster.preset", Kind::Preset,
             QStringList{kCustom} + toQStrings(plan::clusterPresetNames()));
    addField(cluster, tr("Nodes"), "cluster.nodes", Kind::Integer);
    addField(cluster, tr("Devices per node"), "cluster.devices_per_node", Kind::Integer);
    addField(cluster, tr("NVLink domain"), "cluster.nvlink_domain", Kind::Integer, {},
             tr("Devices that share the fast fabric"));
    addField(cluster, tr("Device"), "cluster.device", Kind::Choice, toQStrings(plan::devicePresetNames()));
    addField(cluster, tr("NVLink GB/s"), "cluster.intra_node_bandwidth_GBps", Kind::Number);
    addField(cluster, tr("Network GB/s"), "cluster.inter_node_bandwidth_GBps", Kind::Number);
    addField(cluster, tr("NVLink latency (µs)"), "cluster.intra_node_latency_us", Kind::Number);
    addField(cluster, tr("Network latency (µs)"), "cluster.inter_node_latency_us", Kind::Number);
    addField(cluster, tr("Compute efficiency"), "cluster.compute_efficiency", Kind::Number);
    column->addStretch(1);

    auto* scroll = new QScrollArea;
    scroll->setWidget(content);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    // The form scrolls down, never sideways: the column is at least as wide as its fields.
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll->setMinimumWidth(content->minimumSizeHint().width() + scroll->verticalScrollBar()->sizeHint().width());
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->addWidget(scroll);

    connect(m_document, &JobDocument::specChanged, this, &JobForm::refresh);
    refresh();
}

QWidget* JobForm::addField(QFormLayout* form, const QString& label, const QString& path, Kind kind,
                           const QStringList& choices, const QString& hint)
{
    auto* cell = new QWidget;
    auto* box = new QVBoxLayout(cell);
    box->setContentsMargins(0, 0, 0, 0);
    box->setSpacing(1);

    QWidget* editor = nullptr;
    const std::size_t index = m_fields.size();
    if (kind == Kind::Integer || kind == Kind::Number) {
        auto* line = new QLineEdit;
        if (!hint.isEmpty())
            line->setPlaceholderText(hint);
        connect(line, &QLineEdit::editingFinished, this, [this, index] { commit(m_fields[index]); });
        editor = line;
    } else if (kind == Kind::Flag) {
        auto* check = new QCheckBox;
        connect(check, &QCheckBox::toggled, this, [this, index] { commit(m_fields[index]); });
        editor = check;
    } else {
        auto* combo = new QComboBox;
        combo->addItems(choices);
        connect(combo, &QComboBox::currentIndexChanged, this, [this, index] { commit(m_fields[index]); });
        editor = combo;
    }
    editor->setObjectName(path);
    QLabel* error = newErrorLabel();
    box->addWidget(editor);
    box->addWidget(error);
    form->addRow(label, cell);

    m_index.insert(path, index);
    m_fields.push_back({path, kind, editor, error, {}});
    return editor;
}

QWidget* JobForm::editor(const QString& path) const
{
    const auto it = m_index.constFind(path);
    return it == m_index.cend() ? nullptr : m_fields[*it].editor;
}

QString JobForm::errorText(const QString& path) const
{
    const auto it = m_index.constFind(path);
    return it == m_index.cend() ? QString() : m_fields[*it].error->text();
}

QString JobForm::generalErrorText() const { return m_general->text(); }

QStringList JobForm::paths() const
{
    QStringList out;
    for (const Field& f : m_fields)
        out << f.path;
    return out;
}

void JobForm::clearInputErrors()
{
    for (Field& f : m_fields)
        f.inputError.clear();
    refresh();
}

QString JobForm::displayValue(const QString& path) const
{
    const nlohmann::json own = m_document->value(path);
    if (!own.is_null())
        return jsonToText(own);
    // A field the document leaves out shows the value the engine would use (a preset's, a default).
    if (path.startsWith(u"model.moe.") && m_document->value("model.moe").is_null())
        return {};
    if (!m_document->spec())
        return {};
    const nlohmann::json effective = plan::toJson(*m_document->spec());
    const auto pointer = pointerOf(path);
    return effective.contains(pointer) ? jsonToText(effective.at(pointer)) : QString();
}

void JobForm::refresh()
{
    m_refreshing = true;
    for (Field& f : m_fields) {
        if (!f.inputError.isEmpty())
            continue;  // keep the user's unparseable text in front of its message
        const QString text = displayValue(f.path);
        if (auto* line = qobject_cast<QLineEdit*>(f.editor)) {
            if (line->text() != text)
                line->setText(text);
        } else if (auto* check = qobject_cast<QCheckBox*>(f.editor)) {
            check->setChecked(text == u"true");
        } else if (auto* combo = qobject_cast<QComboBox*>(f.editor)) {
            if (f.kind == Kind::Preset)
                combo->setCurrentIndex(
                    std::max(0, combo->findText(m_document->value(f.path).is_string() ? text : kCustom)));
            else
                combo->setCurrentIndex(combo->findText(text));
        }
    }
    m_refreshing = false;
    showErrors();
}

void JobForm::showErrors()
{
    QHash<QString, QStringList> byPath;
    QStringList general;
    for (const FieldError& e : m_document->errors()) {
        if (m_index.contains(e.path))
            byPath[e.path] << e.message;
        else
            general << (e.path.isEmpty() ? e.message : e.path + QStringLiteral(": ") + e.message);
    }
    for (Field& f : m_fields) {
        QStringList messages = byPath.value(f.path);
        if (!f.inputError.isEmpty())
            messages.prepend(f.inputError);
        const QString text = messages.join(u'\n');
        f.error->setText(text);
        f.error->setVisible(!text.isEmpty());
        f.editor->setToolTip(text);
    }
    m_general->setText(general.join(u'\n'));
    m_general->setVisible(!general.isEmpty());
}

void JobForm::commit(Field& field)
{
    if (m_refreshing)
        return;
    nlohmann::json value;
    field.inputError.clear();
    if (auto* line = qobject_cast<QLineEdit*>(field.editor)) {
        const QString text = line->text().trimmed();
        bool ok = true;
        if (text.isEmpty()) {
            // An empty field removes the key (the engine's default, or "is required" when it has none);
            // an empty expert count makes the model dense.
            if (field.path == u"model.moe.experts") {
                m_document->set("model.moe", nullptr);
                return;
            }
        } else if (field.kind == Kind::Integer) {
            const qlonglong n = QLocale::c().toLongLong(text, &ok);
            if (ok)
                value = std::int64_t(n);
            else
                field.inputError = text.contains(QRegularExpression(QStringLiteral("^[+-]?[0-9]+$")))
                                       ? tr("%1 is too large for a whole number").arg(text)
                                       : tr("'%1' is not a whole number").arg(text);
        } else {
            const double x = QLocale::c().toDouble(text, &ok);
            ok = ok && std::isfinite(x);
            if (ok)
                value = x;
            else
                field.inputError = tr("'%1' is not a number").arg(text);
        }
        if (!ok) {
            showErrors();
            return;
        }
    } else if (auto* check = qobject_cast<QCheckBox*>(field.editor)) {
        value = check->isChecked();
    } else if (auto* combo = qobject_cast<QComboBox*>(field.editor)) {
        if (field.kind == Kind::Preset) {
            choosePreset(combo->currentText());
            return;
        }
        if (combo->currentIndex() < 0)
            return;
        value = combo->currentText().toStdString();
    }
    if (value == m_document->value(field.path)) {
        showErrors();  // the input error, if any, is gone
        return;
    }
    m_document->set(field.path, value);
}

void JobForm::choosePreset(const QString& preset)
{
    if (preset != kCustom) {
        // A preset fills every cluster field; the hand-set overrides go with the old choice.
        m_document->set("cluster", nlohmann::json{{"preset", preset.toStdString()}});
        return;
    }
    if (m_document->value("cluster.preset").is_null())
        return;
    // Custom starts from the preset's figures, written out so that each can be changed.
    nlohmann::json cluster = m_document->value("cluster");
    if (m_document->spec())
        cluster = plan::toJson(*m_document->spec())["cluster"];
    cluster.erase("preset");
    m_document->set("cluster", cluster);
}

}  // namespace meshbench::app
