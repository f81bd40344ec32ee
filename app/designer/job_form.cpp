#include "job_form.h"

#include "job_document.h"

#include "plan/spec_schema.h"

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

QString toQString(std::string_view text) { return QString::fromUtf8(text.data(), qsizetype(text.size())); }

// The keys of a section and of the sections inside it that the Designer shows, in the schema's order.
void addShownKeys(std::string_view section, std::vector<const plan::SpecKey*>& out)
{
    for (const plan::SpecKey* key : plan::specKeysIn(section)) {
        if (key->type == plan::SpecType::Section)
            addShownKeys(key->path, out);
        else if (key->notShown.empty())
            out.push_back(key);
    }
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

    // A group for each top-level section with keys on the form. The labels are the schema's, in
    // English as the engine's messages are.
    for (const plan::SpecKey* top : plan::specKeysIn("")) {
        std::vector<const plan::SpecKey*> keys;
        if (top->type == plan::SpecType::Section)
            addShownKeys(top->path, keys);
        if (keys.empty())
            continue;
        QFormLayout* form = section(toQString(top->label));
        for (const plan::SpecKey* key : keys)
            addField(form, *key);
    }
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

void JobForm::addField(QFormLayout* form, const plan::SpecKey& key)
{
    Kind kind = Kind::Choice;
    QStringList choices;
    switch (key.type) {
    case plan::SpecType::Integer:
        kind = Kind::Integer;
        break;
    case plan::SpecType::Number:
        kind = Kind::Number;
        break;
    case plan::SpecType::Flag:
        kind = Kind::Flag;
        break;
    case plan::SpecType::Preset:
        kind = Kind::Preset;
        choices << kCustom;
        break;
    case plan::SpecType::Choice:
    case plan::SpecType::Text:
    case plan::SpecType::TextList:  // none shown yet: they would need an editor of their own
    case plan::SpecType::TextMap:
    case plan::SpecType::Section:
        break;
    }
    for (const std::string& name : key.choices)
        choices << QString::fromStdString(name);
    const QString path = toQString(key.path);
    const plan::SpecKey* section = plan::specKey(key.section());
    const bool optionalInside = section && !section->required && !section->section().empty();

    auto* cell = new QWidget;
    auto* box = new QVBoxLayout(cell);
    box->setContentsMargins(0, 0, 0, 0);
    box->setSpacing(1);

    QWidget* editor = nullptr;
    const std::size_t index = m_fields.size();
    if (kind == Kind::Integer || kind == Kind::Number) {
        auto* line = new QLineEdit;
        if (!key.placeholder.empty())
            line->setPlaceholderText(toQString(key.placeholder));
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
    form->addRow(toQString(key.label), cell);

    m_index.insert(path, index);
    m_fields.push_back(
        {path, kind, editor, error, {}, optionalInside ? toQString(section->path) : QString(), key.required});
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

QString JobForm::displayValue(const Field& field) const
{
    const nlohmann::json own = m_document->value(field.path);
    if (!own.is_null())
        return jsonToText(own);
    // A field the document leaves out shows the value the engine would use (a preset's, a default),
    // except in an optional section the document leaves out (a dense model has no experts).
    if (!field.optionalSection.isEmpty() && m_document->value(field.optionalSection).is_null())
        return {};
    if (!m_document->spec())
        return {};
    const nlohmann::json effective = plan::toJson(*m_document->spec());
    const auto pointer = pointerOf(field.path);
    return effective.contains(pointer) ? jsonToText(effective.at(pointer)) : QString();
}

void JobForm::refresh()
{
    m_refreshing = true;
    for (Field& f : m_fields) {
        if (!f.inputError.isEmpty())
            continue;  // keep the user's unparseable text in front of its message
        const QString text = displayValue(f);
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
            // emptying what an optional section requires removes the section: an empty expert count
            // makes the model dense.
            if (field.required && !field.optionalSection.isEmpty()) {
                m_document->set(field.optionalSection, nullptr);
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
