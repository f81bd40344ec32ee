#include "topology_view.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace meshbench::app {
namespace {

constexpr double kMargin = 8;
constexpr double kHeader = 18;     // warning / summary line
constexpr double kBusHeight = 30;  // network line and its label
constexpr double kNodeGap = 10;
constexpr double kNodePad = 3;
constexpr double kNodeTitle = 14;

constexpr int groupBit(plan::GroupKind kind) { return 1 << int(kind); }

const plan::GroupKind kHighlighted[] = {plan::GroupKind::Tensor, plan::GroupKind::Pipeline, plan::GroupKind::Data,
                                        plan::GroupKind::Expert};
const char kGroupLetter[] = {'T', 'P', 'D', 'E', 'X'};

QColor errorColor() { return QColor(0xd6, 0x27, 0x28); }

QString gbps(double bytesPerSecond) { return QString::number(bytesPerSecond / 1e9, 'g', 4) + QStringLiteral(" GB/s"); }

QString count(std::int64_t n, const QString& singular, const QString& plural)
{
    return QString::number(n) + u' ' + (n == 1 ? singular : plural);
}

}  // namespace

TopologyView::TopologyView(QWidget* parent) : QWidget(parent)
{
    setMouseTracking(true);
    setMinimumSize(200, 150);
}

QColor TopologyView::stageColor(int stage)
{
    // Tableau 10: distinct hues of middle lightness, readable with dark or light text around them.
    static const QColor colors[] = {QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b), QColor(0x59, 0xa1, 0x4f),
                                    QColor(0xe1, 0x57, 0x59), QColor(0x76, 0xb7, 0xb2), QColor(0xed, 0xc9, 0x48),
                                    QColor(0xb0, 0x7a, 0xa1), QColor(0xff, 0x9d, 0xa7), QColor(0x9c, 0x75, 0x5f),
                                    QColor(0xba, 0xb0, 0xac)};
    return colors[std::size_t(stage < 0 ? 0 : stage) % std::size(colors)];
}

void TopologyView::setSpec(const std::optional<plan::JobSpec>& spec)
{
    m_spec = spec;
    m_mesh.reset();
    m_rankOfDevice.clear();
    m_crossing.clear();
    m_nodeStage.clear();
    m_warnings.clear();
    m_devices = 0;
    m_nodes = 0;
    if (m_spec && m_spec->cluster.devices() <= kDrawLimit) {
        const plan::ClusterSpec& cluster = m_spec->cluster;
        m_devices = cluster.devices();
        m_nodes = cluster.nodes;
        m_devicesPerNode = cluster.devicesPerNode;
        m_mesh.emplace(m_spec->parallel);
        m_rankOfDevice.assign(std::size_t(m_devices), -1);
        // Ranks past the device count have nowhere to go (validation reports that), devices past
        // the world size stay empty.
        const std::int64_t ranks = std::min<std::int64_t>(m_mesh->worldSize(), m_devices);
        std::vector<int> domainOfDevice(std::size_t(m_devices), 0);
        for (int r = 0; r < ranks; ++r) {
            const plan::DevicePlace place = plan::placeRank(r, cluster);
            const std::int64_t device = std::int64_t(place.node) * m_devicesPerNode + place.device;
            if (device >= 0 && device < m_devices) {
                m_rankOfDevice[std::size_t(device)] = r;
                domainOfDevice[std::size_t(device)] = place.domain;
            }
        }
        // A TP group crosses when its members sit in different domains.
        std::unordered_map<int, int> groupDomain;
        std::unordered_map<int, bool> groupCrosses;
        for (std::int64_t d = 0; d < m_devices; ++d) {
            const int rank = m_rankOfDevice[std::size_t(d)];
            if (rank < 0)
                continue;
            const int key = tensorKey(rank);
            const int domain = domainOfDevice[std::size_t(d)];
            const auto [it, fresh] = groupDomain.emplace(key, domain);
            if (!fresh && it->second != domain)
                groupCrosses[key] = true;
        }
        m_crossing.assign(std::size_t(m_devices), false);
        for (std::int64_t d = 0; d < m_devices; ++d) {
            const int rank = m_rankOfDevice[std::size_t(d)];
            m_crossing[std::size_t(d)] = rank >= 0 && groupCrosses.count(tensorKey(rank)) > 0;
        }
        // Dominant stage per node, for the aggregated drawing.
        m_nodeStage.assign(std::size_t(m_nodes), -1);
        std::vector<int> counts(std::size_t(m_mesh->pp()), 0);
        for (int n = 0; n < m_nodes; ++n) {
            std::fill(counts.begin(), counts.end(), 0);
            for (int i = 0; i < m_devicesPerNode; ++i) {
                const int rank = m_rankOfDevice[std::size_t(std::int64_t(n) * m_devicesPerNode + i)];
                if (rank >= 0)
                    ++counts[std::size_t(m_mesh->coordOf(rank).pp)];
            }
            const auto best = std::max_element(counts.begin(), counts.end());
            if (*best > 0)
                m_nodeStage[std::size_t(n)] = int(best - counts.begin());
        }
        if (m_mesh->worldSize() <= m_devices)
            m_warnings = plan::placementWarnings(*m_mesh, cluster);
    }
    m_selected = -1;
    m_selectedGroups.clear();
    relayout();
    update();
}

int TopologyView::tensorKey(int rank) const
{
    const plan::MeshCoord c = m_mesh->coordOf(rank);
    return m_mesh->rankOf(c.dp, c.pp, 0);
}

void TopologyView::setShowDataParallel(bool on)
{
    m_showDp = on;
    update();
}

void TopologyView::setShowExpertParallel(bool on)
{
    m_showEp = on;
    update();
}

void TopologyView::selectDevice(int device)
{
    m_selectedGroups.clear();
    const int rank = rankOnDevice(device);
    m_selected = rank >= 0 ? device : -1;
    if (rank >= 0) {
        // Rank -> device through the inverse of the placement built in setSpec.
        std::unordered_map<int, int> deviceOfRank;
        for (std::size_t d = 0; d < m_rankOfDevice.size(); ++d)
            if (m_rankOfDevice[d] >= 0)
                deviceOfRank[m_rankOfDevice[d]] = int(d);
        m_selectedGroups.assign(std::size_t(m_devices), 0);
        for (plan::GroupKind kind : kHighlighted)
            for (int member : m_mesh->groupOf(kind, rank))
                if (const auto it = deviceOfRank.find(member); it != deviceOfRank.end())
                    m_selectedGroups[std::size_t(it->second)] |= groupBit(kind);
    }
    emit deviceSelected(m_selected, rank);
    update();
}

int TopologyView::rankOnDevice(int device) const
{
    return device >= 0 && std::size_t(device) < m_rankOfDevice.size() ? m_rankOfDevice[std::size_t(device)] : -1;
}

bool TopologyView::tensorGroupCrossesDomain(int device) const
{
    return device >= 0 && std::size_t(device) < m_crossing.size() && m_crossing[std::size_t(device)];
}

void TopologyView::resizeEvent(QResizeEvent* event)
{
    QWidget::resizeEvent(event);
    relayout();
}

void TopologyView::relayout()
{
    m_nodeRects.clear();
    m_area = QRectF(kMargin, kMargin + kHeader, width() - 2 * kMargin, height() - 2 * kMargin - kHeader - kBusHeight);
    // The nodes' bounds centred in the area, the network line just below them; whole pixels so
    // that aggregated cells stay one mark per pixel.
    auto place = [this](double w, double h) {
        m_content = QRectF(std::floor(m_area.left() + (m_area.width() - w) / 2),
                           std::floor(m_area.top() + (m_area.height() - h) / 2), w, h);
        m_busY = m_content.bottom() + kBusHeight * 0.35;
    };
    place(m_area.width(), m_area.height());
    if (m_nodes <= 0 || m_area.width() < 4 || m_area.height() < 4)
        return;

    m_aggregated = m_devices > kDetailLimit;
    if (!m_aggregated) {
        // The node grid and device arrangement (up to 8 across, in full rows) whose device cells
        // come out largest; the widest arrangement on a tie.
        double bestCell = 0;
        int bestColumns = 1;
        m_deviceColumns = std::min(m_devicesPerNode, 8);
        for (int deviceColumns = m_deviceColumns; deviceColumns >= 1; --deviceColumns) {
            if (deviceColumns != m_devicesPerNode && m_devicesPerNode % deviceColumns != 0)
                continue;
            const int deviceRows = (m_devicesPerNode + deviceColumns - 1) / deviceColumns;
            for (int columns = 1; columns <= m_nodes; ++columns) {
                const int rows = (m_nodes + columns - 1) / columns;
                const double cellW =
                    (m_area.width() - (columns - 1) * kNodeGap - columns * 2 * kNodePad) / (columns * deviceColumns);
                const double cellH = (m_area.height() - (rows - 1) * kNodeGap - rows * (2 * kNodePad + kNodeTitle)) /
                                     (rows * deviceRows);
                const double cell = std::min({cellW, cellH, kMaxCell});
                if (cell > bestCell) {
                    bestCell = cell;
                    bestColumns = columns;
                    m_deviceColumns = deviceColumns;
                }
            }
        }
        m_cell = std::floor(bestCell);
        m_aggregated = m_cell < 4;  // too small to see a device: fall back to one cell per node
        if (!m_aggregated) {
            const int deviceRows = (m_devicesPerNode + m_deviceColumns - 1) / m_deviceColumns;
            const double nodeW = m_deviceColumns * m_cell + 2 * kNodePad;
            const double nodeH = deviceRows * m_cell + 2 * kNodePad + kNodeTitle;
            const int rows = (m_nodes + bestColumns - 1) / bestColumns;
            place(bestColumns * nodeW + (bestColumns - 1) * kNodeGap, rows * nodeH + (rows - 1) * kNodeGap);
            for (int n = 0; n < m_nodes; ++n) {
                const int column = n % bestColumns, row = n / bestColumns;
                m_nodeRects.emplace_back(m_content.left() + column * (nodeW + kNodeGap),
                                         m_content.top() + row * (nodeH + kNodeGap), nodeW, nodeH);
            }
            return;
        }
    }
    // Aggregated: square cells, as large as fit; several nodes per pixel cell if even 1 px is too much.
    const double area = m_area.width() * m_area.height();
    m_cell = std::max(1.0, std::floor(std::sqrt(area / m_nodes)));
    auto columnsFor = [this](double cell) { return std::max(1, int(m_area.width() / cell)); };
    while (m_cell > 1 && double(columnsFor(m_cell)) * std::floor(m_area.height() / m_cell) < m_nodes)
        m_cell -= 1;
    m_gridColumns = columnsFor(m_cell);
    const double capacity = double(m_gridColumns) * std::max(1.0, std::floor(m_area.height() / m_cell));
    m_nodesPerCell = std::max(1, int(std::ceil(m_nodes / capacity)));
    const int cells = (m_nodes + m_nodesPerCell - 1) / m_nodesPerCell;
    const int rows = (cells + m_gridColumns - 1) / m_gridColumns;
    place(std::min(cells, m_gridColumns) * m_cell, rows * m_cell);
}

QRectF TopologyView::deviceRect(int device) const
{
    if (device < 0 || device >= m_devices || m_nodes <= 0)
        return {};
    const int node = device / m_devicesPerNode;
    if (m_aggregated) {
        const int cell = node / m_nodesPerCell;
        const int column = cell % m_gridColumns, row = cell / m_gridColumns;
        return QRectF(m_content.left() + column * m_cell, m_content.top() + row * m_cell, m_cell, m_cell);
    }
    if (std::size_t(node) >= m_nodeRects.size())
        return {};
    const int local = device % m_devicesPerNode;
    const QRectF& box = m_nodeRects[std::size_t(node)];
    const int column = local % m_deviceColumns, row = local / m_deviceColumns;
    return QRectF(box.left() + kNodePad + column * m_cell, box.top() + kNodePad + kNodeTitle + row * m_cell, m_cell,
                  m_cell);
}

int TopologyView::deviceAt(QPointF point) const
{
    if (m_nodes <= 0 || !m_content.contains(point))
        return -1;
    if (m_aggregated) {
        const int column = int((point.x() - m_content.left()) / m_cell);
        const int row = int((point.y() - m_content.top()) / m_cell);
        if (column >= m_gridColumns)
            return -1;
        const std::int64_t node = (std::int64_t(row) * m_gridColumns + column) * m_nodesPerCell;
        return node < m_nodes ? int(node * m_devicesPerNode) : -1;
    }
    for (std::size_t n = 0; n < m_nodeRects.size(); ++n) {
        if (!m_nodeRects[n].contains(point))
            continue;
        const QRectF& box = m_nodeRects[n];
        const double x = point.x() - box.left() - kNodePad;
        const double y = point.y() - box.top() - kNodePad - kNodeTitle;
        if (x < 0 || y < 0)
            return -1;
        const int column = int(x / m_cell);
        const int local = int(y / m_cell) * m_deviceColumns + column;
        return column < m_deviceColumns && local < m_devicesPerNode ? int(n) * m_devicesPerNode + local : -1;
    }
    return -1;
}

QRectF TopologyView::headerRect() const { return QRectF(kMargin, kMargin, width() - 2 * kMargin, kHeader); }

QString TopologyView::toolTipTextAt(QPointF point) const
{
    // The header line is elided when narrow; its tooltip has it whole.
    if (headerRect().contains(point))
        return headerText();
    const int device = deviceAt(point);
    if (device < 0)
        return {};
    const int node = device / m_devicesPerNode;
    if (m_aggregated) {
        const int last = std::min(m_nodes, node + m_nodesPerCell) - 1;
        QString text = last > node ? tr("nodes %1–%2").arg(node).arg(last) : tr("node %1").arg(node);
        const int first = rankOnDevice(device);
        if (first >= 0)
            text += tr(": ranks from %1, mostly stage %2").arg(first).arg(m_nodeStage[std::size_t(node)]);
        return text;
    }
    const int rank = rankOnDevice(device);
    QString text = tr("node %1, device %2").arg(node).arg(device % m_devicesPerNode);
    if (rank < 0)
        return text + tr(": no rank");
    const plan::MeshCoord c = m_mesh->coordOf(rank);
    text += tr("\nrank %1: dp %2, pp %3, tp %4, ep %5").arg(rank).arg(c.dp).arg(c.pp).arg(c.tp).arg(c.ep);
    if (tensorGroupCrossesDomain(device))
        text += tr("\nits TP group crosses an NVLink domain boundary");
    return text;
}

bool TopologyView::event(QEvent* event)
{
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const QString text = toolTipTextAt(help->pos());
        if (text.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(help->globalPos(), text, this);
        return true;
    }
    return QWidget::event(event);
}

void TopologyView::mousePressEvent(QMouseEvent* event)
{
    if (event->button() == Qt::LeftButton)
        selectDevice(deviceAt(event->position()));
    QWidget::mousePressEvent(event);
}

QString TopologyView::headerText() const
{
    if (!m_spec)
        return tr("No cluster: fix the errors in the form.");
    if (m_spec->cluster.devices() > kDrawLimit)
        return tr("%1 devices: too many to draw").arg(m_spec->cluster.devices());
    if (!m_warnings.empty())
        return QStringLiteral("⚠ ") + QString::fromStdString(m_warnings.front());
    if (m_mesh->worldSize() != m_devices)
        return tr("%1 ranks on %2 devices").arg(m_mesh->worldSize()).arg(m_devices);
    const QString size = count(m_nodes, tr("node"), tr("nodes")) + QStringLiteral(" × ") +
                         count(m_devicesPerNode, tr("device"), tr("devices"));
    return m_aggregated ? tr("%1, one cell per node in its main stage's colour").arg(size) : size;
}

void TopologyView::paintEvent(QPaintEvent* event)
{
    QPainter painter(this);
    const QPalette pal = palette();
    painter.fillRect(rect(), pal.color(QPalette::Base));
    painter.setPen(m_warnings.empty() ? pal.color(QPalette::Text) : errorColor());
    const QRectF header = headerRect();
    painter.drawText(header, Qt::AlignLeft | Qt::AlignVCenter,
                     painter.fontMetrics().elidedText(headerText(), Qt::ElideRight, int(header.width())));
    if (m_nodes <= 0 || m_area.width() < 4 || m_area.height() < 4)
        return;

    // The network: one line under every node, labelled with the per-GPU bandwidth.
    painter.setPen(QPen(pal.color(QPalette::Text), 2));
    painter.drawLine(QPointF(m_content.left(), m_busY), QPointF(m_content.right(), m_busY));
    painter.drawText(QRectF(m_content.left(), m_busY + 2, m_area.right() - m_content.left(), kBusHeight * 0.6),
                     Qt::AlignLeft | Qt::AlignTop, tr("network %1 per GPU").arg(gbps(m_spec->cluster.interBandwidth)));
    if (m_aggregated)
        paintAggregated(painter, event->rect());
    else
        paintDetailed(painter, event->rect());
}

void TopologyView::paintDetailed(QPainter& painter, const QRect& clip) const
{
    const QPalette pal = palette();
    const plan::ClusterSpec& cluster = m_spec->cluster;
    const QColor text = pal.color(QPalette::Text);
    const bool domainIsNode = cluster.nvlinkDomain == m_devicesPerNode;

    // Domains larger than a node (NVL72 racks): a frame around the nodes of each domain, row by row.
    if (cluster.nvlinkDomain > m_devicesPerNode) {
        painter.setPen(QPen(pal.color(QPalette::Highlight), 1.5, Qt::DashLine));
        painter.setBrush(Qt::NoBrush);
        const int nodesPerDomain = std::max(1, cluster.nvlinkDomain / m_devicesPerNode);
        QRectF frame;
        for (int n = 0; n < m_nodes; ++n) {
            const QRectF box = m_nodeRects[std::size_t(n)].adjusted(-4, -4, 4, 4);
            const bool newDomain = n % nodesPerDomain == 0;
            if (!frame.isNull() && (newDomain || box.top() > frame.bottom())) {
                painter.drawRoundedRect(frame, 4, 4);
                frame = QRectF();
            }
            frame = frame.isNull() ? box : frame.united(box);
        }
        if (!frame.isNull())
            painter.drawRoundedRect(frame, 4, 4);
    }

    // Node titles small; device labels in the normal font once cells are large enough for it.
    QFont small = font();
    small.setPointSizeF(std::max(6.0, small.pointSizeF() * 0.8));
    const QFont cellFont = m_cell >= 40 ? font() : small;
    for (int n = 0; n < m_nodes; ++n) {
        const QRectF& box = m_nodeRects[std::size_t(n)];
        if (!box.toAlignedRect().intersects(clip) && !(clip.bottom() >= m_busY && clip.top() <= m_busY))
            continue;
        // The node's link to the network.
        painter.setPen(QPen(pal.color(QPalette::Mid), 1));
        painter.drawLine(QPointF(box.center().x(), box.bottom()), QPointF(box.center().x(), m_busY));
        painter.setPen(QPen(text, 1));
        painter.setBrush(pal.color(QPalette::AlternateBase));
        painter.drawRoundedRect(box, 3, 3);
        const QString title =
            domainIsNode ? tr("node %1 · NVLink %2").arg(n).arg(gbps(cluster.intraBandwidth)) : tr("node %1").arg(n);
        painter.setFont(small);
        painter.drawText(QRectF(box.left() + kNodePad, box.top(), box.width() - 2 * kNodePad, kNodeTitle),
                         Qt::AlignLeft | Qt::AlignVCenter,
                         painter.fontMetrics().elidedText(title, Qt::ElideRight, int(box.width())));

        painter.setFont(cellFont);
        for (int local = 0; local < m_devicesPerNode; ++local) {
            const int device = n * m_devicesPerNode + local;
            const QRectF cell = deviceRect(device).adjusted(1, 1, -1, -1);
            const int rank = m_rankOfDevice[std::size_t(device)];
            painter.setPen(Qt::NoPen);
            painter.setBrush(rank >= 0 ? stageColor(m_mesh->coordOf(rank).pp) : pal.color(QPalette::Mid));
            painter.drawRect(cell);
            if (rank < 0)
                continue;
            const plan::MeshCoord c = m_mesh->coordOf(rank);
            if (m_cell >= 18) {
                QString label = QString::number(rank);
                if (m_showDp)
                    label += QStringLiteral("\nd%1").arg(c.dp);
                if (m_showEp)
                    label += QStringLiteral("\ne%1").arg(c.ep);
                painter.setPen(Qt::black);  // the stage colours are all mid-light
                painter.drawText(cell, Qt::AlignCenter, label);
            }
            // TP group outline: an edge wherever the neighbour belongs to another group.
            painter.setPen(QPen(text, 2));
            const int key = tensorKey(rank);
            auto sameGroup = [&](int otherLocal) {
                if (otherLocal < 0 || otherLocal >= m_devicesPerNode)
                    return false;
                const int other =
                    m_rankOfDevice[std::size_t(n) * std::size_t(m_devicesPerNode) + std::size_t(otherLocal)];
                return other >= 0 && tensorKey(other) == key;
            };
            const int column = local % m_deviceColumns;
            const QRectF edge = deviceRect(device);
            if (column == 0 || !sameGroup(local - 1))
                painter.drawLine(edge.topLeft(), edge.bottomLeft());
            if (column == m_deviceColumns - 1 || !sameGroup(local + 1))
                painter.drawLine(edge.topRight(), edge.bottomRight());
            if (!sameGroup(local - m_deviceColumns))
                painter.drawLine(edge.topLeft(), edge.topRight());
            if (!sameGroup(local + m_deviceColumns))
                painter.drawLine(edge.bottomLeft(), edge.bottomRight());

            if (m_crossing[std::size_t(device)]) {
                // Warning marker: a red triangle in the corner.
                const double s = std::max(5.0, m_cell * 0.3);
                const QPointF corner = edge.topRight();
                painter.setPen(Qt::NoPen);
                painter.setBrush(errorColor());
                painter.drawPolygon(QPolygonF({corner, corner + QPointF(-s, 0), corner + QPointF(0, s)}));
            }
            if (!m_selectedGroups.empty() && m_selectedGroups[std::size_t(device)] != 0) {
                painter.setPen(QPen(pal.color(QPalette::Highlight), device == m_selected ? 4 : 2.5));
                painter.setBrush(Qt::NoBrush);
                painter.drawRect(cell.adjusted(2, 2, -2, -2));
                if (m_cell >= 18) {
                    QString letters;
                    for (plan::GroupKind kind : kHighlighted)
                        if (m_selectedGroups[std::size_t(device)] & groupBit(kind))
                            letters += QLatin1Char(kGroupLetter[int(kind)]);
                    painter.setPen(Qt::black);
                    painter.drawText(cell.adjusted(3, 1, -3, -1), Qt::AlignLeft | Qt::AlignBottom, letters);
                }
            }
        }
    }
}

void TopologyView::paintAggregated(QPainter& painter, const QRect& clip) const
{
    const QPalette pal = palette();
    const int cells = (m_nodes + m_nodesPerCell - 1) / m_nodesPerCell;
    const int firstRow = std::max(0, int((clip.top() - m_content.top()) / m_cell));
    const int lastRow = int((clip.bottom() - m_content.top()) / m_cell);
    painter.setPen(Qt::NoPen);
    // Gaps between cells only when they are big enough to keep some colour.
    const double inset = m_cell >= 6 ? 1 : 0;
    for (int row = firstRow; row <= lastRow; ++row) {
        for (int column = 0; column < m_gridColumns; ++column) {
            const int cell = row * m_gridColumns + column;
            if (cell >= cells)
                return;
            const int node = cell * m_nodesPerCell;
            const int stage = m_nodeStage[std::size_t(node)];
            const QRectF box(m_content.left() + column * m_cell, m_content.top() + row * m_cell, m_cell - inset,
                             m_cell - inset);
            painter.fillRect(box, stage >= 0 ? stageColor(stage) : pal.color(QPalette::Mid));
            if (m_cell >= 6 && m_crossing[std::size_t(std::int64_t(node) * m_devicesPerNode)])
                painter.fillRect(QRectF(box.right() - m_cell / 3, box.top(), m_cell / 3, m_cell / 3), errorColor());
        }
    }
}

}  // namespace meshbench::app
