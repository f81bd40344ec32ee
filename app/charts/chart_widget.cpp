#include "charts/chart_widget.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QMenu>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <utility>
#include <vector>

namespace meshbench::app {

namespace {

void styleAxis(QCPAxis* axis, const QPalette& palette, const QFont& tickFont, const QFont& labelFont)
{
    axis->setTickLabelFont(tickFont);
    axis->setLabelFont(labelFont);
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

constexpr int kMaxTicks = 5;
// Label fonts relative to the widget's: small panels need every line they can get.
constexpr double kTickFontScale = 0.85;
constexpr double kLabelFontScale = 0.9;

QFont scaledFont(QFont font, double scale)
{
    if (font.pointSizeF() > 0)
        font.setPointSizeF(font.pointSizeF() * scale);
    else
        font.setPixelSize(std::max(1, int(std::lround(font.pixelSize() * scale))));
    return font;
}

// A QCustomPlot that lets its owner adjust to the sizes a layout pass gave, then lays out again.
class FittingPlot : public QCustomPlot {
public:
    FittingPlot(QWidget* parent, std::function<bool()> fit) : QCustomPlot(parent), m_fit(std::move(fit)) {}

protected:
    void updateLayout() override
    {
        QCustomPlot::updateLayout();
        if (m_fit())
            QCustomPlot::updateLayout();
    }

private:
    std::function<bool()> m_fit;
};

// Ticks as close as their labels allow: stacked labels a line apart, side-by-side ones a gap
// wider than the widest. The ticker may round the count up to a readable step, hence the margin.
int tickCountFor(const QCPAxis* axis, int length)
{
    const QFontMetrics metrics(axis->tickLabelFont());
    double spacing = 2.0 * metrics.height();
    if (axis->orientation() == Qt::Horizontal) {
        int widest = metrics.horizontalAdvance(QStringLiteral("0000"));
        for (const QString& label : axis->tickVectorLabels())
            widest = std::max(widest, metrics.horizontalAdvance(label));
        spacing = 1.5 * widest + metrics.height();
    }
    return std::clamp(int(length / spacing), 2, kMaxTicks);
}

// The most columns whose entries fit in `width`: a column is as wide as its widest entry.
int legendColumnsFor(const QCPLegend* legend, int width)
{
    // itemCount() counts the grid's cells, the empty ones a wrap leaves included.
    std::vector<int> widths;
    for (int i = 0; i < legend->itemCount(); ++i)
        if (const QCPAbstractLegendItem* item = legend->item(i))
            widths.push_back(item->minimumOuterSizeHint().width());
    const int frame = legend->margins().left() + legend->margins().right();
    for (std::size_t columns = widths.size(); columns > 1; --columns) {
        int total = frame + int(columns - 1) * legend->columnSpacing();
        for (std::size_t column = 0; column < columns; ++column) {
            int widest = 0;
            for (std::size_t i = column; i < widths.size(); i += columns)
                widest = std::max(widest, widths[i]);
            total += widest;
        }
        if (total <= width)
            return int(columns);
    }
    return 1;
}

class PercentTicker : public QCPAxisTicker {
protected:
    QString getTickLabel(double tick, const QLocale& locale, QChar, int) override
    {
        return locale.toString(tick * 100, 'g', 4) + QLatin1Char('%');
    }
};

}  // namespace

QSharedPointer<QCPAxisTicker> percentTicker() { return QSharedPointer<QCPAxisTicker>(new PercentTicker); }

QColor seriesColor(int index)
{
    // Hues spread around the wheel at a lightness between the two themes' backgrounds.
    static constexpr std::array<QRgb, 10> colors{0x4e79a7, 0xf28e2b, 0xe15759, 0x76b7b2, 0x59a14f,
                                                 0xedc948, 0xb07aa1, 0xff9da7, 0x9c755f, 0xbab0ac};
    return QColor(colors[std::size_t(index) % colors.size()]);
}

ChartWidget::ChartWidget(QWidget* parent)
    : QWidget(parent), m_plot(new FittingPlot(this, [this] { return fitToSize(); }))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(2);
    layout->addWidget(m_plot, 1);
    // The plot's own hint is its legends unwrapped in one line: far wider than it needs to be.
    m_plot->setMinimumSize(200, 120);
    m_plot->setNoAntialiasingOnDrag(true);

    m_menu = new QMenu(this);
    m_menu->addAction(tr("Export as PNG…"), this, [this] { exportWithChosenPath(QStringLiteral("png")); });
    m_menu->addAction(tr("Export as PDF…"), this, [this] { exportWithChosenPath(QStringLiteral("pdf")); });
    m_chooser = [this](const QString& suggestedName, const QString& filter) {
        return QFileDialog::getSaveFileName(this, tr("Export chart"), suggestedName, filter);
    };
    // The plot keeps its mouse events to itself (no propagation to this widget): it asks for the menu.
    m_plot->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(m_plot, &QWidget::customContextMenuRequested, this,
            [this](QPoint pos) { m_menu->popup(m_plot->mapToGlobal(pos)); });
    restyle();
}

ChartWidget::~ChartWidget() = default;

QHBoxLayout* ChartWidget::controls()
{
    if (!m_controls) {
        m_controls = new QHBoxLayout;
        m_controls->setContentsMargins(6, 2, 6, 0);
        static_cast<QVBoxLayout*>(layout())->insertLayout(0, m_controls);
    }
    return m_controls;
}

void ChartWidget::rebuild()
{
    reset();
    replot();
}

void ChartWidget::replot() { m_plot->replot(QCustomPlot::rpQueuedReplot); }

void ChartWidget::restyle()
{
    const QPalette& p = palette();
    const QFont tickFont = scaledFont(font(), kTickFontScale), labelFont = scaledFont(font(), kLabelFontScale);
    m_plot->setBackground(p.brush(QPalette::Window));
    for (QCPLayoutElement* element : m_plot->plotLayout()->elements(true)) {
        if (auto* rect = qobject_cast<QCPAxisRect*>(element)) {
            rect->setBackground(p.brush(QPalette::Base));
            for (QCPAxis* axis : rect->axes())
                styleAxis(axis, p, tickFont, labelFont);
        } else if (auto* scale = qobject_cast<QCPColorScale*>(element)) {
            styleAxis(scale->axis(), p, tickFont, labelFont);
        } else if (auto* legend = qobject_cast<QCPLegend*>(element)) {
            legend->setTextColor(p.color(QPalette::Text));
            legend->setFont(labelFont);
            for (int i = 0; i < legend->itemCount(); ++i) {
                if (QCPAbstractLegendItem* item = legend->item(i)) {  // null: a cell a wrap left empty
                    item->setTextColor(p.color(QPalette::Text));
                    item->setFont(labelFont);
                }
            }
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
    grid->setRowStretchFactor(row, 0.001);  // as tall as its text, the panels take the rest
    legend->setLayer(QStringLiteral("legend"));
    legend->setFillOrder(QCPLegend::foColumnsFirst);
    legend->setBrush(Qt::NoBrush);
    legend->setBorderPen(Qt::NoPen);
    legend->setMargins(QMargins(4, 2, 4, 0));
    legend->setRowSpacing(1);
    legend->setIconSize(16, 9);
    legend->setIconTextPadding(4);
    legend->setVisible(true);
}

bool ChartWidget::fitToSize()
{
    bool changed = false;
    const auto fitTicks = [&changed](QCPAxis* axis, int length) {
        if (!axis->visible() || !axis->tickLabels())
            return;
        const int count = tickCountFor(axis, length);
        if (axis->ticker()->tickCount() != count) {
            axis->ticker()->setTickCount(count);
            changed = true;
        }
    };
    QCPLayoutGrid* grid = m_plot->plotLayout();
    for (QCPLayoutElement* element : grid->elements(true)) {
        if (auto* rect = qobject_cast<QCPAxisRect*>(element)) {
            for (QCPAxis* axis : rect->axes())
                fitTicks(axis, axis->orientation() == Qt::Horizontal ? rect->width() : rect->height());
        } else if (auto* scale = qobject_cast<QCPColorScale*>(element)) {
            fitTicks(scale->axis(), scale->type() == QCPAxis::atLeft || scale->type() == QCPAxis::atRight
                                        ? scale->rect().height()
                                        : scale->rect().width());
        }
    }
    // Legend rows (legendRow puts them in the first column) get the width the other columns leave.
    int width = m_plot->viewport().width();
    for (int column = 1; column < grid->columnCount(); ++column) {
        int widest = 0;
        for (int row = 0; row < grid->rowCount(); ++row)
            if (grid->hasElement(row, column))
                widest = std::max(widest, grid->element(row, column)->outerRect().width());
        width -= widest + grid->columnSpacing();
    }
    for (int row = 0; row < grid->rowCount(); ++row) {
        auto* legend = grid->hasElement(row, 0) ? qobject_cast<QCPLegend*>(grid->element(row, 0)) : nullptr;
        if (!legend || legend->itemCount() == 0)
            continue;
        const int columns = legendColumnsFor(legend, width);
        if (legend->wrap() != columns) {
            legend->setWrap(columns);
            legend->setFillOrder(QCPLegend::foColumnsFirst);  // re-flows the entries
            changed = true;
        }
    }
    return changed;
}

void ChartWidget::changeEvent(QEvent* event)
{
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::FontChange)
        restyle();
    QWidget::changeEvent(event);
}

void ChartWidget::setPathChooser(PathChooser chooser) { m_chooser = std::move(chooser); }

void ChartWidget::exportWithChosenPath(const QString& suffix)
{
    const QString filter = suffix == QLatin1String("pdf") ? tr("PDF documents (*.pdf)") : tr("PNG images (*.png)");
    const QString name = objectName().isEmpty() ? QStringLiteral("chart") : objectName();
    QString path = m_chooser(name + QLatin1Char('.') + suffix, filter);
    if (path.isEmpty())
        return;
    // Not every platform's dialog adds the filter's suffix, and exportImage goes by the suffix.
    if (QFileInfo(path).suffix().compare(suffix, Qt::CaseInsensitive) != 0)
        path += QLatin1Char('.') + suffix;
    QString error;
    if (!exportImage(path, {}, &error))
        QToolTip::showText(mapToGlobal(rect().center()), error, this);  // beside the chart, not a modal box
    emit exportFinished(path, error);
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
