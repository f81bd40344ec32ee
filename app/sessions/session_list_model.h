#pragma once
// The sessions of a folder as a table (store::listSessions), kept current by a QFileSystemWatcher
// on the folder (debounced). Files that cannot be read are rows too, with the outcome
// "unreadable" and the reason as their tooltip. SortRole gives raw values (QDateTime, double,
// int) so a proxy sorts dates and losses numerically; PathRole gives the file's path in any column.

#include <QAbstractTableModel>
#include <QDateTime>
#include <QSortFilterProxyModel>
#include <QString>

#include <optional>
#include <vector>

class QFileSystemWatcher;
class QTimer;

namespace meshbench::app {

class SessionListModel : public QAbstractTableModel {
    Q_OBJECT

public:
    enum Column { Name, Date, Layout, Outcome, Steps, FinalLoss, Path, ColumnCount };
    enum Role { SortRole = Qt::UserRole + 1, PathRole, ReadableRole };

    struct Row {
        QString path;
        QString name;
        QDateTime created;  // invalid for an unreadable file
        QString layout;
        QString outcome;  // running, completed, failed, stopped, or unreadable
        QString detail;   // a failure's cause, or why the file cannot be read
        int steps = 0;
        std::optional<double> finalLoss;
        bool readable = true;
    };

    explicit SessionListModel(QObject* parent = nullptr);

    // Lists `dir` now and watches it. A folder that does not exist yet lists nothing (and is
    // picked up once it appears only on the next refresh() or setDirectory()).
    void setDirectory(const QString& dir);
    QString directory() const { return m_dir; }
    // Why the folder itself could not be listed; empty when it could.
    QString error() const { return m_error; }
    const Row& row(int index) const { return m_rows[std::size_t(index)]; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

public slots:
    void refresh();

signals:
    void refreshed();
    void errorChanged(const QString& error);

private:
    QString m_dir;
    QString m_error;
    std::vector<Row> m_rows;
    QFileSystemWatcher* m_watcher = nullptr;
    QTimer* m_debounce = nullptr;
};

// Filters rows whose name, layout or outcome contains the text (case-insensitive); sorts by
// SessionListModel::SortRole.
class SessionFilterModel : public QSortFilterProxyModel {
    Q_OBJECT

public:
    explicit SessionFilterModel(QObject* parent = nullptr);
    QString filterText() const { return m_text; }

public slots:
    void setFilterText(const QString& text);

protected:
    bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

private:
    QString m_text;
};

}  // namespace meshbench::app
