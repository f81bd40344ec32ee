#pragma once
// The cluster drawn with the job's mesh over it: nodes as boxes with their devices inside, the
// NVLink domains and the network labelled with bandwidth, each device coloured by the pipeline
// stage of the rank placed on it (plan::placeRank, as the agents place ranks), TP groups
// outlined, and a warning marker where a TP group leaves its NVLink domain. Above
// kDetailLimit devices (or when cells would be too small) each node is drawn as one cell in
// its dominant stage's colour, never more than one mark per pixel. Small clusters are drawn
// large (devices up to kMaxCell px), centred with the network just below them.

#include "job_document.h"

#include "plan/mesh.h"

#include <QWidget>

class QPainter;

#include <optional>
#include <vector>

namespace meshbench::app {

class TopologyView : public QWidget {
    Q_OBJECT
public:
    static constexpr int kDetailLimit = 512;
    // The largest device cell, in pixels.
    static constexpr double kMaxCell = 96;
    // Beyond this many devices nothing is placed (a spec can name far more than anyone draws).
    static constexpr std::int64_t kDrawLimit = 1 << 20;

    explicit TopologyView(QWidget* parent = nullptr);

    // The device (node * devices_per_node + local index) under a point; -1 when none. In the
    // aggregated drawing it is the first device of the node under the point.
    int deviceAt(QPointF point) const;
    // The rank placed on a device; -1 when none (more devices than ranks, or no spec).
    int rankOnDevice(int device) const;
    // Where a device is drawn (its node's cell when aggregated); empty when it is not drawn.
    QRectF deviceRect(int device) const;
    bool isAggregated() const { return m_aggregated; }
    int selectedDevice() const { return m_selected; }
    // The tooltip text for a point: rank and (dp, pp, tp, ep), or the node's ranks when aggregated;
    // over the header line, the whole header (warnings can be longer than the view is wide).
    QString toolTipTextAt(QPointF point) const;
    // Devices whose TP group spans more than one NVLink domain.
    bool tensorGroupCrossesDomain(int device) const;

    // Fixed categorical colours, one per stage (cycling), readable on light and dark backgrounds.
    static QColor stageColor(int stage);

    QSize sizeHint() const override { return {480, 320}; }

public slots:
    void setSpec(const std::optional<meshbench::plan::JobSpec>& spec);
    void setShowDataParallel(bool on);
    void setShowExpertParallel(bool on);
    // Highlights every group of the rank on this device (-1 clears).
    void selectDevice(int device);

signals:
    void deviceSelected(int device, int rank);

protected:
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    bool event(QEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;

private:
    void relayout();
    void paintDetailed(QPainter& painter, const QRect& clip) const;
    void paintAggregated(QPainter& painter, const QRect& clip) const;
    QString headerText() const;
    QRectF headerRect() const;
    int tensorKey(int rank) const;

    std::optional<plan::JobSpec> m_spec;
    std::optional<plan::Mesh> m_mesh;
    std::int64_t m_devices = 0;
    int m_devicesPerNode = 1;
    int m_nodes = 0;
    std::vector<int> m_rankOfDevice;
    std::vector<bool> m_crossing;       // per device: its TP group leaves its NVLink domain
    std::vector<int> m_nodeStage;       // per node: the stage most of its ranks belong to (-1: none)
    std::vector<int> m_selectedGroups;  // per device: bit mask of the GroupKinds shared with the selection
    std::vector<std::string> m_warnings;
    bool m_showDp = false;
    bool m_showEp = false;
    int m_selected = -1;

    // Geometry.
    bool m_aggregated = false;
    QRectF m_area;      // the space for nodes
    QRectF m_content;   // where nodes are drawn: their bounds, centred in m_area
    double m_busY = 0;  // the network line, under m_content
    // Detailed: node boxes, device cells of `m_cell` px in `m_deviceColumns` columns per node.
    std::vector<QRectF> m_nodeRects;
    double m_cell = 0;
    int m_deviceColumns = 1;
    // Aggregated: cells of `m_cell` px, `m_gridColumns` per row, `m_nodesPerCell` nodes each.
    int m_gridColumns = 1;
    int m_nodesPerCell = 1;
};

}  // namespace meshbench::app
