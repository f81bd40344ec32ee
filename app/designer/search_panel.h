#pragma once
// Layout search over the designed job's model and cluster: runs plan::searchLayouts on a worker
// thread, lists the ranked layouts (sortable, filterable) and applies one to the document.

#include <QWidget>

class QCheckBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSortFilterProxyModel;
class QSpinBox;
class QTableView;
class QTabWidget;
class QThread;

namespace meshbench::app {

class JobDocument;
class SearchResultsModel;
class SearchScatter;

class SearchPanel : public QWidget {
    Q_OBJECT
public:
    explicit SearchPanel(JobDocument* document, QWidget* parent = nullptr);
    ~SearchPanel() override;

    SearchResultsModel* model() const { return m_model; }
    QSortFilterProxyModel* proxy() const { return m_proxy; }
    QTableView* table() const { return m_table; }
    // The same layouts as a picture (tokens/s against memory per GPU), in the tab beside the table.
    SearchScatter* scatter() const { return m_scatter; }
    QTabWidget* views() const { return m_views; }
    QLineEdit* filterEdit() const { return m_filter; }
    bool isRunning() const { return m_worker != nullptr; }

public slots:
    // Starts a search on a copy of the current spec; does nothing while one runs or without a spec.
    void runSearch();
    // Writes the layout of a proxy row into the document.
    void applyRow(int proxyRow);

signals:
    void searchFinished();

private:
    void updateFilter();
    // Selects the table row of the result's candidate `index` (a click on the scatter).
    void selectCandidate(int index);

    JobDocument* m_document;
    SearchResultsModel* m_model;
    QSortFilterProxyModel* m_proxy;
    QTableView* m_table;
    SearchScatter* m_scatter;
    QTabWidget* m_views;
    QLineEdit* m_filter;
    QCheckBox* m_sequenceParallelOnly;
    QSpinBox* m_top;
    QPushButton* m_run;
    QPushButton* m_apply;
    QLabel* m_status;
    QThread* m_worker = nullptr;
};

}  // namespace meshbench::app
