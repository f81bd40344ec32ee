#pragma once
// The job's model, parallel layout and cluster as form fields, bound both ways to a JobDocument.
// The fields are the job-spec schema's (plan/spec_schema.h): a field for every key it shows in the
// Designer, with the schema's label, choices and hint, grouped by the schema's sections.
// Numbers are typed into line edits and parsed here, so that a typing mistake is reported
// rather than clamped away; everything parseable goes to the document and the engine's
// validation messages appear inline under the field whose JSON path they name.

#include <QHash>
#include <QString>
#include <QWidget>

#include <vector>

class QFormLayout;
class QLabel;

namespace meshbench::plan {
struct SpecKey;
}

namespace meshbench::app {

class JobDocument;

class JobForm : public QWidget {
    Q_OBJECT
public:
    explicit JobForm(JobDocument* document, QWidget* parent = nullptr);

    // The editor of the field at a JSON path (QLineEdit, QComboBox or QCheckBox); null if none.
    QWidget* editor(const QString& path) const;
    // The inline message shown under that field; empty when it has none.
    QString errorText(const QString& path) const;
    // Errors whose path matches no field (or the whole document).
    QString generalErrorText() const;
    // The JSON paths of the keys the form edits, in the form's order.
    QStringList paths() const;

    // Forgets parse errors of half-typed text, e.g. after another file was loaded.
    void clearInputErrors();

public slots:
    // Shows the document's values and errors.
    void refresh();

private:
    enum class Kind { Integer, Number, Choice, Flag, Preset };
    struct Field {
        QString path;
        Kind kind;
        QWidget* editor = nullptr;
        QLabel* error = nullptr;
        QString inputError;  // the text typed could not be parsed; the document is unchanged
        // The optional section the key is in, inside another ("model.moe"); empty when none.
        QString optionalSection;
        bool required = false;  // within its section
    };

    void addField(QFormLayout* form, const plan::SpecKey& key);
    void commit(Field& field);
    void choosePreset(const QString& preset);
    void showErrors();
    // The document's value of a field, or the value the engine fills in when the document omits it.
    QString displayValue(const Field& field) const;

    JobDocument* m_document;
    std::vector<Field> m_fields;
    QHash<QString, std::size_t> m_index;
    QLabel* m_general = nullptr;
    bool m_refreshing = false;
};

}  // namespace meshbench::app
