#include "plan/mesh.h"
#include "plan/presets.h"

#include <QtTest>

#include <algorithm>
#include <array>
#include <set>
#include <thread>

using namespace meshbench::plan;

Q_DECLARE_METATYPE(GroupKind)
Q_DECLARE_METATYPE(RankOrder)

namespace {

constexpr GroupKind kKinds[] = {GroupKind::Tensor, GroupKind::Pipeline, GroupKind::Data, GroupKind::Expert,
                                GroupKind::ExpertData};

QList<int> toList(const std::vector<int>& ranks) { return QList<int>(ranks.begin(), ranks.end()); }

QString qs(std::string_view text) { return QString::fromUtf8(text.data(), qsizetype(text.size())); }

// What a group of each kind means, stated on coordinates rather than rank arithmetic: the
// coordinates its members share, and the coordinate that is the member's index in the group.
// TP varies tp; PP varies pp; DP varies dp; EP varies dp % ep inside one dp / ep block;
// expert-DP varies dp / ep at one dp % ep.
std::array<int, 3> sharedCoords(GroupKind kind, const MeshCoord& c)
{
    switch (kind) {
    case GroupKind::Tensor:
        return {c.dp, c.pp, 0};
    case GroupKind::Pipeline:
        return {c.dp, c.tp, 0};
    case GroupKind::Data:
        return {c.pp, c.tp, 0};
    case GroupKind::Expert:
        return {c.pp, c.tp, c.edp};
    case GroupKind::ExpertData:
        return {c.pp, c.tp, c.ep};
    }
    return {};
}

int groupIndex(GroupKind kind, const MeshCoord& c)
{
    switch (kind) {
    case GroupKind::Tensor:
        return c.tp;
    case GroupKind::Pipeline:
        return c.pp;
    case GroupKind::Data:
        return c.dp;
    case GroupKind::Expert:
        return c.ep;
    case GroupKind::ExpertData:
        return c.edp;
    }
    return -1;
}

void addMeshColumns()
{
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("ep");
    QTest::addColumn<RankOrder>("order");
}

// A few meshes of different shapes for the property tests.
void addMeshRows()
{
    addMeshColumns();
    QTest::newRow("4x2x2 ep2 tp-dp-pp") << 4 << 2 << 2 << 2 << RankOrder::TpDpPp;
    QTest::newRow("4x2x2 ep2 tp-pp-dp") << 4 << 2 << 2 << 2 << RankOrder::TpPpDp;
    QTest::newRow("8x3x2 ep4 tp-pp-dp") << 8 << 3 << 2 << 4 << RankOrder::TpPpDp;
    QTest::newRow("6x1x4 ep3 tp-dp-pp") << 6 << 1 << 4 << 3 << RankOrder::TpDpPp;
    QTest::newRow("3x5x1 ep1 tp-dp-pp") << 3 << 5 << 1 << 1 << RankOrder::TpDpPp;
    QTest::newRow("1x1x1") << 1 << 1 << 1 << 1 << RankOrder::TpDpPp;
}

Mesh fetchMesh()
{
    QFETCH(int, dp);
    QFETCH(int, pp);
    QFETCH(int, tp);
    QFETCH(int, ep);
    QFETCH(RankOrder, order);
    return Mesh(dp, pp, tp, ep, order);
}

}  // namespace

class TestMesh : public QObject {
    Q_OBJECT

private slots:
    void coordinates_data();
    void coordinates();
    void meshFromParallelSpec();
    void roundTrip_data();
    void roundTrip();
    void groupsPartitionRanks_data();
    void groupsPartitionRanks();
    void concreteGroups_data();
    void concreteGroups();
    void expertGroupsFactorDataGroup_data();
    void expertGroupsFactorDataGroup();
    void placeRank_data();
    void placeRank();
    void groupsStayInDomain_data();
    void groupsStayInDomain();
    void groupsStayInDomainMatchesMembers_data();
    void groupsStayInDomainMatchesMembers();
    void placementWarnings_data();
    void placementWarnings();
    void presetNamesResolve();
    void datasheetFigures();
    void clusterSizes();
};

void TestMesh::coordinates_data()
{
    addMeshColumns();
    QTest::addColumn<int>("rank");
    QTest::addColumn<int>("cTp");
    QTest::addColumn<int>("cDp");
    QTest::addColumn<int>("cPp");
    QTest::addColumn<int>("cEp");
    QTest::addColumn<int>("cEdp");

    // tp-dp-pp, dp 4 pp 2 tp 2 ep 2: rank = tp + 2 dp + 8 pp; ep = dp % 2, edp = dp / 2.
    const auto d = RankOrder::TpDpPp;
    QTest::newRow("tp-dp-pp 0") << 4 << 2 << 2 << 2 << d << 0 << 0 << 0 << 0 << 0 << 0;
    QTest::newRow("tp-dp-pp 1") << 4 << 2 << 2 << 2 << d << 1 << 1 << 0 << 0 << 0 << 0;
    QTest::newRow("tp-dp-pp 5") << 4 << 2 << 2 << 2 << d << 5 << 1 << 2 << 0 << 0 << 1;    // 1 + 2*2
    QTest::newRow("tp-dp-pp 7") << 4 << 2 << 2 << 2 << d << 7 << 1 << 3 << 0 << 1 << 1;    // 1 + 2*3
    QTest::newRow("tp-dp-pp 8") << 4 << 2 << 2 << 2 << d << 8 << 0 << 0 << 1 << 0 << 0;    // 8*1
    QTest::newRow("tp-dp-pp 13") << 4 << 2 << 2 << 2 << d << 13 << 1 << 2 << 1 << 0 << 1;  // 1 + 2*2 + 8*1
    QTest::newRow("tp-dp-pp 15") << 4 << 2 << 2 << 2 << d << 15 << 1 << 3 << 1 << 1 << 1;  // 1 + 2*3 + 8*1
    // tp-pp-dp, same degrees: rank = tp + 2 pp + 4 dp.
    const auto o = RankOrder::TpPpDp;
    QTest::newRow("tp-pp-dp 6") << 4 << 2 << 2 << 2 << o << 6 << 0 << 1 << 1 << 1 << 0;    // 2*1 + 4*1
    QTest::newRow("tp-pp-dp 11") << 4 << 2 << 2 << 2 << o << 11 << 1 << 2 << 1 << 0 << 1;  // 1 + 2*1 + 4*2
    QTest::newRow("tp-pp-dp 13") << 4 << 2 << 2 << 2 << o << 13 << 1 << 3 << 0 << 1 << 1;  // 1 + 4*3
    // dp 8 ep 4, no tp/pp: rank = dp; 6 % 4 = 2, 6 / 4 = 1.
    QTest::newRow("dp8 ep4 6") << 8 << 1 << 1 << 4 << d << 6 << 0 << 6 << 0 << 2 << 1;
}

void TestMesh::coordinates()
{
    const Mesh mesh = fetchMesh();
    QFETCH(int, rank);
    QFETCH(int, cTp);
    QFETCH(int, cDp);
    QFETCH(int, cPp);
    QFETCH(int, cEp);
    QFETCH(int, cEdp);
    const MeshCoord c = mesh.coordOf(rank);
    QCOMPARE(c.tp, cTp);
    QCOMPARE(c.dp, cDp);
    QCOMPARE(c.pp, cPp);
    QCOMPARE(c.ep, cEp);
    QCOMPARE(c.edp, cEdp);
    QCOMPARE(mesh.rankOf(cDp, cPp, cTp), rank);
}

void TestMesh::meshFromParallelSpec()
{
    ParallelSpec p;
    p.dp = 4;
    p.pp = 2;
    p.tp = 2;
    p.ep = 2;
    p.order = RankOrder::TpPpDp;
    const Mesh mesh(p);
    QCOMPARE(mesh.worldSize(), 16);
    QCOMPARE(mesh.ep(), 2);
    // tp-pp-dp: rank 13 = 1 + 2*0 + 4*3.
    const MeshCoord c = mesh.coordOf(13);
    QCOMPARE(c.tp, 1);
    QCOMPARE(c.pp, 0);
    QCOMPARE(c.dp, 3);
}

void TestMesh::roundTrip_data() { addMeshRows(); }

void TestMesh::roundTrip()
{
    const Mesh mesh = fetchMesh();
    QCOMPARE(mesh.worldSize(), mesh.dp() * mesh.pp() * mesh.tp());
    // coordinates -> rank -> coordinates, over every coordinate; the ranks hit are 0..world-1 once each.
    std::vector<int> hits(std::size_t(mesh.worldSize()), 0);
    for (int d = 0; d < mesh.dp(); ++d)
        for (int p = 0; p < mesh.pp(); ++p)
            for (int t = 0; t < mesh.tp(); ++t) {
                const int rank = mesh.rankOf(d, p, t);
                QVERIFY(rank >= 0 && rank < mesh.worldSize());
                ++hits[std::size_t(rank)];
                const MeshCoord c = mesh.coordOf(rank);
                QCOMPARE(c.dp, d);
                QCOMPARE(c.pp, p);
                QCOMPARE(c.tp, t);
                QCOMPARE(c.ep, d % mesh.ep());
                QCOMPARE(c.edp, d / mesh.ep());
            }
    QVERIFY(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
    // rank -> coordinates -> rank.
    for (int rank = 0; rank < mesh.worldSize(); ++rank) {
        const MeshCoord c = mesh.coordOf(rank);
        QCOMPARE(mesh.rankOf(c.dp, c.pp, c.tp), rank);
    }
}

void TestMesh::groupsPartitionRanks_data()
{
    addMeshColumns();
    QTest::addColumn<GroupKind>("kind");
    QTest::addColumn<int>("size");
    // Expected sizes: tp, pp, dp, ep, dp / ep.
    struct Shape {
        const char* name;
        int dp, pp, tp, ep;
        RankOrder order;
    };
    const Shape shapes[] = {{"4x2x2 ep2 tp-dp-pp", 4, 2, 2, 2, RankOrder::TpDpPp},
                            {"4x2x2 ep2 tp-pp-dp", 4, 2, 2, 2, RankOrder::TpPpDp},
                            {"8x3x2 ep4 tp-pp-dp", 8, 3, 2, 4, RankOrder::TpPpDp},
                            {"6x1x4 ep3 tp-dp-pp", 6, 1, 4, 3, RankOrder::TpDpPp}};
    for (const Shape& s : shapes) {
        const int sizes[] = {s.tp, s.pp, s.dp, s.ep, s.dp / s.ep};
        for (std::size_t k = 0; k < std::size(kKinds); ++k)
            QTest::addRow("%s %s", s.name, groupKindName(kKinds[k]).data())
                << s.dp << s.pp << s.tp << s.ep << s.order << kKinds[k] << sizes[k];
    }
}

void TestMesh::groupsPartitionRanks()
{
    const Mesh mesh = fetchMesh();
    QFETCH(GroupKind, kind);
    QFETCH(int, size);
    QCOMPARE(mesh.groupSize(kind), size);

    const std::vector<std::vector<int>> groups = mesh.groups(kind);
    QCOMPARE(int(groups.size()), mesh.worldSize() / size);
    std::vector<int> seen(std::size_t(mesh.worldSize()), 0);
    for (const std::vector<int>& group : groups) {
        QCOMPARE(int(group.size()), size);
        const MeshCoord head = mesh.coordOf(group.front());
        for (std::size_t i = 0; i < group.size(); ++i) {
            const int rank = group[i];
            QVERIFY(rank >= 0 && rank < mesh.worldSize());
            ++seen[std::size_t(rank)];
            const MeshCoord c = mesh.coordOf(rank);
            QVERIFY(sharedCoords(kind, c) == sharedCoords(kind, head));
            QCOMPARE(groupIndex(kind, c), int(i));
            QCOMPARE(mesh.indexInGroup(kind, rank), int(i));
        }
    }
    QVERIFY(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));

    for (int rank = 0; rank < mesh.worldSize(); ++rank) {
        const std::vector<int> group = mesh.groupOf(kind, rank);
        QVERIFY(std::find(group.begin(), group.end(), rank) != group.end());
        const auto listed = std::find_if(groups.begin(), groups.end(), [&](const std::vector<int>& g) {
            return std::find(g.begin(), g.end(), rank) != g.end();
        });
        QVERIFY(listed != groups.end());
        QCOMPARE(toList(group), toList(*listed));
    }
}

void TestMesh::concreteGroups_data()
{
    addMeshColumns();
    QTest::addColumn<GroupKind>("kind");
    QTest::addColumn<int>("rank");
    QTest::addColumn<QList<int>>("expected");
    const auto d = RankOrder::TpDpPp;
    const auto o = RankOrder::TpPpDp;
    // dp 4 pp 2 tp 2 ep 2, tp-dp-pp: rank = tp + 2 dp + 8 pp.
    QTest::newRow("tp of 5") << 4 << 2 << 2 << 2 << d << GroupKind::Tensor << 5 << QList<int>{4, 5};
    QTest::newRow("pp of 3") << 4 << 2 << 2 << 2 << d << GroupKind::Pipeline << 3 << QList<int>{3, 11};
    QTest::newRow("dp of 1") << 4 << 2 << 2 << 2 << d << GroupKind::Data << 1 << QList<int>{1, 3, 5, 7};
    QTest::newRow("dp of 12") << 4 << 2 << 2 << 2 << d << GroupKind::Data << 12 << QList<int>{8, 10, 12, 14};
    // EP: dp indices {0,1} or {2,3} of one (pp, tp); expert-DP: dp indices {0,2} or {1,3}.
    QTest::newRow("ep of 1") << 4 << 2 << 2 << 2 << d << GroupKind::Expert << 1 << QList<int>{1, 3};
    QTest::newRow("ep of 7") << 4 << 2 << 2 << 2 << d << GroupKind::Expert << 7 << QList<int>{5, 7};
    QTest::newRow("expert-dp of 1") << 4 << 2 << 2 << 2 << d << GroupKind::ExpertData << 1 << QList<int>{1, 5};
    QTest::newRow("expert-dp of 7") << 4 << 2 << 2 << 2 << d << GroupKind::ExpertData << 7 << QList<int>{3, 7};
    // tp-pp-dp: rank = tp + 2 pp + 4 dp; rank 13 is tp 1, pp 0, dp 3.
    QTest::newRow("tp-pp-dp pp of 13") << 4 << 2 << 2 << 2 << o << GroupKind::Pipeline << 13 << QList<int>{13, 15};
    QTest::newRow("tp-pp-dp dp of 13") << 4 << 2 << 2 << 2 << o << GroupKind::Data << 13 << QList<int>{1, 5, 9, 13};
    QTest::newRow("tp-pp-dp ep of 13") << 4 << 2 << 2 << 2 << o << GroupKind::Expert << 13 << QList<int>{9, 13};
    QTest::newRow("tp-pp-dp expert-dp of 13")
        << 4 << 2 << 2 << 2 << o << GroupKind::ExpertData << 13 << QList<int>{5, 13};
}

void TestMesh::concreteGroups()
{
    const Mesh mesh = fetchMesh();
    QFETCH(GroupKind, kind);
    QFETCH(int, rank);
    QFETCH(QList<int>, expected);
    QCOMPARE(toList(mesh.groupOf(kind, rank)), expected);
}

void TestMesh::expertGroupsFactorDataGroup_data() { addMeshRows(); }

void TestMesh::expertGroupsFactorDataGroup()
{
    // Megatron: a rank's EP group and expert-DP group meet only in that rank, and the EP groups
    // of its expert-DP peers tile its DP group (DP = EP x expert-DP).
    // E.g. dp 4 pp 2 tp 2 ep 2, rank 1: EP {1,3}, expert-DP {1,5}; EP(5) = {5,7}; {1,3} + {5,7} = DP {1,3,5,7}.
    const Mesh mesh = fetchMesh();
    for (int rank = 0; rank < mesh.worldSize(); ++rank) {
        const std::vector<int> ep = mesh.groupOf(GroupKind::Expert, rank);
        const std::vector<int> edp = mesh.groupOf(GroupKind::ExpertData, rank);
        const std::vector<int> dp = mesh.groupOf(GroupKind::Data, rank);
        const std::set<int> dpSet(dp.begin(), dp.end());

        std::set<int> common;
        for (int r : ep)
            if (std::find(edp.begin(), edp.end(), r) != edp.end())
                common.insert(r);
        QCOMPARE(common, std::set<int>{rank});

        std::multiset<int> tiled;
        for (int peer : edp) {
            const std::vector<int> peerEp = mesh.groupOf(GroupKind::Expert, peer);
            tiled.insert(peerEp.begin(), peerEp.end());
        }
        QCOMPARE(int(tiled.size()), mesh.dp());  // disjoint: ep x dp/ep members in all
        QVERIFY(std::set<int>(tiled.begin(), tiled.end()) == dpSet);
    }
}

void TestMesh::placeRank_data()
{
    QTest::addColumn<QString>("preset");
    QTest::addColumn<int>("nodes");
    QTest::addColumn<int>("rank");
    QTest::addColumn<int>("node");
    QTest::addColumn<int>("device");
    QTest::addColumn<int>("domain");
    // 2 nodes x 8: node = r / 8, device = r % 8, domain = node.
    QTest::newRow("2x8 rank 0") << "dgx-h100" << 2 << 0 << 0 << 0 << 0;
    QTest::newRow("2x8 rank 7") << "dgx-h100" << 2 << 7 << 0 << 7 << 0;
    QTest::newRow("2x8 rank 8") << "dgx-h100" << 2 << 8 << 1 << 0 << 1;
    QTest::newRow("2x8 rank 13") << "dgx-h100" << 2 << 13 << 1 << 5 << 1;
    QTest::newRow("2x8 rank 15") << "dgx-h100" << 2 << 15 << 1 << 7 << 1;
    // NVL72: trays of 4, one domain of 72.
    QTest::newRow("nvl72 rank 5") << "gb200-nvl72" << 18 << 5 << 1 << 1 << 0;
    QTest::newRow("nvl72 rank 71") << "gb200-nvl72" << 18 << 71 << 17 << 3 << 0;
}

void TestMesh::placeRank()
{
    QFETCH(QString, preset);
    QFETCH(int, nodes);
    QFETCH(int, rank);
    QFETCH(int, node);
    QFETCH(int, device);
    QFETCH(int, domain);
    ClusterSpec cluster = *clusterPreset(preset.toStdString());
    cluster.nodes = nodes;
    const DevicePlace place = meshbench::plan::placeRank(rank, cluster);
    QCOMPARE(place.node, node);
    QCOMPARE(place.device, device);
    QCOMPARE(place.domain, domain);
}

void TestMesh::groupsStayInDomain_data()
{
    addMeshColumns();
    QTest::addColumn<QString>("preset");
    QTest::addColumn<int>("nodes");
    QTest::addColumn<GroupKind>("kind");
    QTest::addColumn<bool>("stays");
    const auto d = RankOrder::TpDpPp;
    // 2 x 8, domain 8: TP 8 groups are {0..7}, {8..15}; TP 16 is {0..15} over both nodes.
    QTest::newRow("tp 8 on 8-GPU nodes") << 2 << 1 << 8 << 1 << d << "dgx-h100" << 2 << GroupKind::Tensor << true;
    QTest::newRow("tp 16 on 8-GPU nodes") << 1 << 1 << 16 << 1 << d << "dgx-h100" << 2 << GroupKind::Tensor << false;
    // dp 2 x tp 8: DP group of rank 0 is {0, 8}, across nodes.
    QTest::newRow("dp over nodes") << 2 << 1 << 8 << 1 << d << "dgx-h100" << 2 << GroupKind::Data << false;
    // dp 4 pp 2 tp 2 ep 2 on 2 x 8: EP group of 0 is {0, 2}, both on node 0.
    QTest::newRow("ep inside node") << 4 << 2 << 2 << 2 << d << "dgx-h100" << 2 << GroupKind::Expert << true;
    // GB200 NVL72: tp 8 over 4-GPU trays, {0..7} is trays 0 and 1 but domain 0; dp 9 x 8 = 72.
    QTest::newRow("nvl72 tp 8") << 9 << 1 << 8 << 1 << d << "gb200-nvl72" << 18 << GroupKind::Tensor << true;
    QTest::newRow("nvl72 dp 9") << 9 << 1 << 8 << 1 << d << "gb200-nvl72" << 18 << GroupKind::Data << true;
    // Two racks (36 trays, 144 GPUs): dp 2 x tp 72; DP group of 0 is {0, 72}, two domains.
    QTest::newRow("two nvl72 racks dp") << 2 << 1 << 72 << 1 << d << "gb200-nvl72" << 36 << GroupKind::Data << false;
}

void TestMesh::groupsStayInDomain()
{
    const Mesh mesh = fetchMesh();
    QFETCH(QString, preset);
    QFETCH(int, nodes);
    QFETCH(GroupKind, kind);
    QFETCH(bool, stays);
    ClusterSpec cluster = *clusterPreset(preset.toStdString());
    cluster.nodes = nodes;
    QCOMPARE(meshbench::plan::groupsStayInDomain(mesh, kind, cluster), stays);
}

void TestMesh::groupsStayInDomainMatchesMembers_data() { addMeshRows(); }

void TestMesh::groupsStayInDomainMatchesMembers()
{
    // groupsStayInDomain reads one period of the rank pattern; every group's member list, domain
    // by domain, must give the same answer for every kind and domain size.
    const Mesh mesh = fetchMesh();
    ClusterSpec cluster = *clusterPreset("dgx-h100");
    for (int domain : {1, 2, 3, 4, 6, 8, 12, 16, 72}) {
        cluster.nvlinkDomain = domain;
        for (GroupKind kind :
             {GroupKind::Tensor, GroupKind::Pipeline, GroupKind::Data, GroupKind::Expert, GroupKind::ExpertData}) {
            bool everyGroupInside = true;
            for (const std::vector<int>& group : mesh.groups(kind))
                for (int rank : group)
                    everyGroupInside = everyGroupInside && rank / domain == group.front() / domain;
            QVERIFY2(meshbench::plan::groupsStayInDomain(mesh, kind, cluster) == everyGroupInside,
                     qPrintable(QString("domain %1, kind %2").arg(domain).arg(int(kind))));
        }
    }
}

void TestMesh::placementWarnings_data()
{
    addMeshColumns();
    QTest::addColumn<QString>("preset");
    QTest::addColumn<int>("nodes");
    QTest::addColumn<QStringList>("warnings");  // one list of required fragments per warning, joined by '|'
    const auto d = RankOrder::TpDpPp;
    QTest::newRow("tp 8 on 8-GPU nodes") << 2 << 1 << 8 << 1 << d << "dgx-h100" << 2 << QStringList{};
    QTest::newRow("tp 4 on 8-GPU nodes") << 4 << 1 << 4 << 1 << d << "dgx-h100" << 2 << QStringList{};
    QTest::newRow("tp 16 on 8-GPU nodes")
        << 1 << 1 << 16 << 1 << d << "dgx-h100" << 2
        << QStringList{"TP group of ranks 0..15|spans nodes 0 to 1|leaves its NVLink domain|devices_per_node=8"};
    // NVL72: {0..7} covers trays 0 and 1, still one NVLink domain.
    QTest::newRow("nvl72 tp 8") << 9 << 1 << 8 << 1 << d << "gb200-nvl72" << 18
                                << QStringList{"TP group of ranks 0..7|spans nodes 0 to 1|(same NVLink domain)|"
                                               "devices_per_node=4"};
    QTest::newRow("nvl72 tp 4") << 18 << 1 << 4 << 1 << d << "gb200-nvl72" << 18 << QStringList{};
    // tp 4 ep 4 on 2 x 8: EP group of 0 is {0, 4, 8, 12}, nodes 0 and 1; tp x ep = 16.
    QTest::newRow("ep over nodes") << 4 << 1 << 4 << 4 << d << "dgx-h100" << 2
                                   << QStringList{"EP groups (tp x ep = 16 ranks) cross NVLink domains"};
}

void TestMesh::placementWarnings()
{
    const Mesh mesh = fetchMesh();
    QFETCH(QString, preset);
    QFETCH(int, nodes);
    QFETCH(QStringList, warnings);
    ClusterSpec cluster = *clusterPreset(preset.toStdString());
    cluster.nodes = nodes;
    const std::vector<std::string> got = meshbench::plan::placementWarnings(mesh, cluster);
    QStringList text;
    for (const std::string& w : got)
        text << QString::fromStdString(w);
    QVERIFY2(int(got.size()) == warnings.size(), qPrintable(text.join(QLatin1Char('\n'))));
    for (qsizetype i = 0; i < warnings.size(); ++i)
        for (const QString& fragment : warnings[i].split(QLatin1Char('|')))
            QVERIFY2(text[i].contains(fragment), qPrintable(text[i] + QStringLiteral(" lacks ") + fragment));
}

void TestMesh::presetNamesResolve()
{
    const auto devices = devicePresetNames();
    QCOMPARE(devices.size(), 6u);  // a100-80gb, h100-sxm, h200-sxm, b200, gb200, cpu
    for (std::string_view name : devices) {
        const auto device = devicePreset(name);
        QVERIFY2(device.has_value(), name.data());
        QCOMPARE(qs(device->kind), qs(name));
        QVERIFY(device->peakFlops > 0 && device->memoryBytes > 0 && device->memoryBandwidth > 0);
    }
    QVERIFY(!devicePreset("h100").has_value());

    const auto clusters = clusterPresetNames();
    QCOMPARE(clusters.size(), 9u);
    for (std::string_view name : clusters) {
        const auto cluster = clusterPreset(name);
        QVERIFY2(cluster.has_value(), name.data());
        QCOMPARE(qs(cluster->preset), qs(name));
        QVERIFY(cluster->devices() >= 1);
        QVERIFY(devicePreset(cluster->device.kind).has_value());
        QVERIFY(cluster->nvlinkDomain % cluster->devicesPerNode == 0 ||
                cluster->devicesPerNode % cluster->nvlinkDomain == 0);
        QVERIFY(cluster->intraBandwidth > 0 && cluster->interBandwidth > 0);
    }
    QVERIFY(!clusterPreset("dgx-h10").has_value());
}

void TestMesh::datasheetFigures()
{
    // NVIDIA datasheets: dense bf16 peak and HBM capacity.
    const DeviceSpec h100 = *devicePreset("h100-sxm");
    QCOMPARE(h100.peakFlops, 989e12);
    QCOMPARE(h100.memoryBytes, 80e9);
    const DeviceSpec a100 = *devicePreset("a100-80gb");
    QCOMPARE(a100.peakFlops, 312e12);
    QCOMPARE(a100.memoryBytes, 80e9);
    const DeviceSpec h200 = *devicePreset("h200-sxm");
    QCOMPARE(h200.memoryBytes, 141e9);
    QCOMPARE(h200.peakFlops, 989e12);  // same Hopper die as H100
}

void TestMesh::clusterSizes()
{
    QCOMPARE(clusterPreset("dgx-h100x128")->devices(), 1024);  // 128 x 8
    QCOMPARE(clusterPreset("dgx-h100x4")->devices(), 32);      // 4 x 8
    const ClusterSpec nvl72 = *clusterPreset("gb200-nvl72");
    QCOMPARE(nvl72.devices(), 72);  // 18 trays x 4
    QCOMPARE(nvl72.devicesPerNode, 4);
    QCOMPARE(nvl72.nvlinkDomain, 72);
    const ClusterSpec local = *clusterPreset("local-cpu");
    QCOMPARE(local.devices(), std::int64_t(std::max(1u, std::thread::hardware_concurrency())));
    QCOMPARE(qs(local.device.kind), QStringLiteral("cpu"));
}

QTEST_APPLESS_MAIN(TestMesh)
#include "tst_mesh.moc"
