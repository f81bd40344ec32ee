#include "monitor/chart_widget.h"

#include "monitor/run_state.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QVBoxLayout>

#include <array>

namespace meshbench::app {

namespace {

void styleAxis(QCPAxis* axis, const QPalette& palette)
{
    const QColor text = palette.color(QPalette::WindowText);
    QColor grid = palette.color(QPalette::WindowText);
    grid.setAlpha(40);
    axis->setBasePen(QPen(text));
    axis->setTickPen(QPen(text));
    axis->setSubTickPen(QPen(text));
    axis->setTickLabelColor(text);
    axis->setLabelColor(text);
    axis->grid()->setPen(QPen(grid, 0, Qt::DotLine));
    grid.setAlpha(80);
    // A zero line marks a value's baseline; at step or rank 0 it would only be clutter.
    axis->grid()->setZeroLinePen(axis->orientation() == Qt::Vertical ? QPen(grid) : QPen(Qt::NoPen));
}

class PercentTicker : public QCPAxisTicker {
protected:
    QString getTickLabel(double tick, const QLocale& locale, QChar, int) override
    {
        return locale.toString(tick * 100, 'g', 4) + QLatin1Char('%');
    }
};

}  // namespace

QSharedPointer<QCPAxisTicker> percentTicker()
{
    return QSharedPointer<QCPAxisTicker>(new PercentTicker);
}

QColor seriesColor(int index)
{
    // Hues spread around the wheel at a lightness between the two themes' backgrounds.
    static constexpr std::array<QRgb, 10> colors{0x4e79a7, 0xf28e2b, 0xe15759, 0x76b7b2, 0x59a14f,
                                                 0xedc948, 0xb07aa1, 0xff9da7, 0x9c755f, 0xbab0ac};
    return QColor(colors[std::size_t(index) % colors.size()]);
}

ChartWidget::ChartWidget(QWidget* parent) : QWidget(parent), m_plot(new QCustomPlot(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_plot, 1);
    m_plot->setNoAntialiasingOnDrag(true);
    restyle();
}

ChartWidget::~ChartWidget() = default;

QHBoxLayout* ChartWidget::controls()
{
    if (!m_controls) {
        m_controls = new QHBoxLayout;
        m_controls->setContentsMargins(6, 4, 6, 0);
        static_cast<QVBoxLayout*>(layout())->insertLayout(0, m_controls);
    }
    return m_controls;
}

void ChartWidget::setRunState(RunState* state)
{
    if (m_state)
        disconnect(m_state, nullptr, this, nullptr);
    m_state = state;
    if (state) {
        connect(state, &RunState::specChanged, this, &ChartWidget::rebuild);
        connect(state, &RunState::stepsChanged, this, &ChartWidget::onStepsChanged);
        connect(state, &RunState::memoryChanged, this, &ChartWidget::onMemoryChanged);
    }
    rebuild();
}

void ChartWidget::rebuild()
{
    reset();
    m_consumed = 0;
    if (m_state) {
        m_generation = m_state->generation();
        appendSteps(0);
        m_consumed = m_state->steps().size();
        refreshMemory();
    }
    replot();
}

void ChartWidget::onStepsChanged()
{
    if (m_state->generation() != m_generation) {
        rebuild();
        return;
    }
    const std::size_t count = m_state->steps().size();
    if (count > m_consumed) {
        appendSteps(m_consumed);
        m_consumed = count;
        replot();
    }
}

void ChartWidget::onMemoryChanged()
{
    if (m_memoryPending)
        return;
    m_memoryPending = true;
    QMetaObject::invokeMethod(
        this,
        [this] {
            m_memoryPending = false;
            if (m_state) {
                refreshMemory();
                replot();
            }
        },
        Qt::QueuedConnection);
}

void ChartWidget::replot()
{
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void ChartWidget::restyle()
{
    const QPalette& p = palette();
    m_plot->setBackground(p.brush(QPalette::Window));
    for (QCPLayoutElement* element : m_plot->plotLayout()->elements(true)) {
        if (auto* rect = qobject_cast<QCPAxisRect*>(element)) {
            rect->setBackground(p.brush(QPalette::Base));
            for (QCPAxis* axis : rect->axes())
                styleAxis(axis, p);
        } else if (auto* scale = qobject_cast<QCPColorScale*>(element)) {
            styleAxis(scale->axis(), p);
        } else if (auto* legend = qobject_cast<QCPLegend*>(element)) {
            legend->setTextColor(p.color(QPalette::Text));
            for (int i = 0; i < legend->itemCount(); ++i)
                legend->item(i)->setTextColor(p.color(QPalette::Text));
        } else if (auto* title = qobject_cast<QCPTextElement*>(element)) {
            title->setTextColor(p.color(QPalette::WindowText));
        }
    }
    applyPalette();
    replot();
}

void ChartWidget::legendRow(QCPLegend* legend, int row)
{
    if (legend->layout())
        legend->layout()->take(legend);
    QCPLayoutGrid* grid = m_plot->plotLayout();
    grid->insertRow(row);
    grid->addElement(row, 0, legend);
    grid->setRowStretchFactor(row, 0.001);   // as tall as its text, the panels take the rest
    legend->setLayer(QStringLiteral("legend"));
    legend->setFillOrder(QCPLegend::foColumnsFirst);
    legend->setBrush(Qt::NoBrush);
    legend->setBorderPen(Qt::NoPen);
    legend->setMargins(QMargins(4, 2, 4, 0));
    legend->setVisible(true);
}

void ChartWidget::changeEvent(QEvent* event)
{
    if (event->type() == QEvent::PaletteChange)
        restyle();
    QWidget::changeEvent(event);
}

bool ChartWidget::exportImage(const QString& path, QSize size, QString* error)
{
    if (size.isEmpty())
        size = m_plot->isVisible() && !m_plot->size().isEmpty() ? m_plot->size() : QSize(1200, 800);
    const QString suffix = QFileInfo(path).suffix().toLower();
    bool written = false;
    if (suffix == QLatin1String("png"))
        written = m_plot->savePng(path, size.width(), size.height());
    else if (suffix == QLatin1String("pdf"))
        written = m_plot->savePdf(path, size.width(), size.height());
    else {
        if (error)
            *error = tr("Export as .png or .pdf: \"%1\" has neither suffix.").arg(path);
        return false;
    }
    if (!written && error)
        *error = tr("Could not write \"%1\": check that its folder exists and is writable.").arg(path);
    return written;
}

}  // namespace meshbench::app
