#include "failure_verdict.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <map>
#include <set>

namespace meshbench::service {

namespace {

store::SessionOutcome failedRank(std::uint32_t rank, std::string cause)
{
    return {store::Outcome::Failed, std::move(cause), std::int32_t(rank), 0};
}

store::SessionOutcome failedJob(std::string cause) { return {store::Outcome::Failed, std::move(cause), -1, 0}; }

bool communicationFailed(const RankLiveness& live)
{
    return live.state == wire::RankState::Failed && live.detail == wire::kCommunicationFailedStatus;
}

// Ranks as runs of consecutive ones: "0-3, 6".
std::string rankRanges(const std::vector<std::uint32_t>& ranks)
{
    std::string out;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
        std::size_t j = i;
        while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
            ++j;
        out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
        i = j;
    }
    return out;
}

std::string seconds(std::int64_t ns)
{
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", double(ns) * 1e-9);
    return text;
}

// A process state letter as the verdicts group them: stopped (by job control or a debugger),
// running (on a core or asleep), or as it is.
char stateGroup(char state) { return state == 't' ? 'T' : state == 'S' ? 'R' : state; }

class Judge {
public:
    explicit Judge(const RunEvidence& evidence) : e(evidence), m_world(std::uint32_t(evidence.ranks.size())) {}

    RunningVerdict whileRunning() const;
    store::SessionOutcome onExit(const ExitStatus& exit) const;

private:
    enum class Fate { NotHeard, WentOn, Silent };

    const RankLiveness& liveness(std::uint32_t rank) const { return e.ranks[rank]; }
    std::string rankWords(std::uint32_t rank) const;
    std::string failedRankCause(std::uint32_t rank) const;
    std::string terminatedRankCause(std::uint32_t rank) const;
    // What a silent rank's process is doing, in words, when this machine started it; empty otherwise.
    std::string silentRankState(std::uint32_t rank) const;
    bool endedBeforeTeardown(const RankLiveness& live) const;
    // The rank whose last heartbeat, sent before any teardown, came first (by the engine's clock)
    // among those `said` picks.
    std::optional<std::uint32_t> firstEnded(const std::function<bool(const RankLiveness&)>& said) const;
    // A cause a rank gave of itself: it failed by itself, or finished before the last step.
    std::optional<store::SessionOutcome> ownVerdict() const;
    // The cause once the launcher has ended (or, without `exit`, while it goes on regardless).
    store::SessionOutcome launcherVerdict(const std::optional<ExitStatus>& exit) const;
    // A launch command's rank that failed, by the word of the shell it ran under; `ended` is how the
    // launcher ended, in words.
    store::SessionOutcome rankExitVerdict(const RankExit& exited, const std::string& ended) const;
    // The host whose launch the launcher could not reach, named, when no rank there was ever heard.
    std::optional<store::SessionOutcome> unreachableHostVerdict() const;
    // What became of every rank once `silent` went quiet (for its heartbeat timeout): each heard
    // rank went on (spoke its last word, or was heard after `silent` had been silent for the
    // timeout) or fell silent too (silent for the timeout itself); nothing while some rank is
    // neither yet, which within one more timeout it is. Deciding on this rather than on how long
    // ago each rank was last heard keeps a rank that was heard a moment before the silence from
    // passing for one that went on.
    std::optional<std::vector<Fate>> fatesAfter(std::uint32_t silent) const;
    // The verdict when every heard rank fell silent together: the network between the engine and
    // every host, named, when the ranks span hosts; nothing when they share one (a host or a job
    // that stopped whole is not a network's doing).
    std::optional<store::SessionOutcome> networkVerdict(const std::vector<Fate>& fates) const;
    // The ranks lost with `rank` when its whole host went: every rank there silent or ended without
    // a word while a rank of another host went on; empty when the rank went alone.
    // With `fates` (fatesAfter's, while the launcher runs), the host's ranks must all have fallen
    // silent and a rank elsewhere gone on.
    std::vector<std::uint32_t> hostLostWith(std::uint32_t rank, const std::vector<Fate>* fates = nullptr) const;
    // The verdict on a lost host, naming it, its ranks and what the engine can see of them.
    store::SessionOutcome hostVerdict(const std::vector<std::uint32_t>& lost, const std::string& rankCause) const;
    // A failed rank's verdict widened to its host when the host went with it.
    store::SessionOutcome widenedToHost(store::SessionOutcome verdict) const;
    std::optional<char> processState(std::uint32_t rank) const
    {
        return e.processState ? e.processState(rank) : std::nullopt;
    }

    const RunEvidence& e;
    std::uint32_t m_world;
};

std::string Judge::rankWords(std::uint32_t rank) const
{
    const plan::MeshCoord& c = e.coords[rank];
    std::string words = "rank " + std::to_string(rank) + " (dp" + std::to_string(c.dp) + " pp" + std::to_string(c.pp) +
                        " tp" + std::to_string(c.tp) + " ep" + std::to_string(c.ep);
    const RankLiveness& live = liveness(rank);
    if (live.pid > 0)
        words += ", " + live.host + " pid " + std::to_string(live.pid);
    return words + ")";
}

std::string Judge::failedRankCause(std::uint32_t rank) const
{
    std::string cause = rankWords(rank) + " failed (exit status " + std::to_string(liveness(rank).detail) + ")";
    if (!e.lastErrors[rank].empty())
        cause += ": " + e.lastErrors[rank];
    return cause;
}

std::string Judge::terminatedRankCause(std::uint32_t rank) const
{
    const int signal = liveness(rank).detail;
    return rankWords(rank) + " was terminated by signal " + std::to_string(signal) + " (" + signalWords(signal) +
           "), which the engine did not send";
}

std::string Judge::silentRankState(std::uint32_t rank) const
{
    switch (processState(rank).value_or(' ')) {
    case 'T':
        return "its process is stopped (SIGSTOP or job control)";
    case 't':
        return "its process is stopped by a debugger";
    case 'D':
        return "its process is waiting on the disk or a driver (state D)";
    case 'R':
    case 'S':
        return "its process runs but its telemetry thread is silent (hung)";
    case '?':
        return "its process is gone (killed without a word, e.g. SIGKILL or out of memory)";
    default:
        return {};
    }
}

bool Judge::endedBeforeTeardown(const RankLiveness& live) const
{
    // What a rank said once the engine began tearing the job down is a consequence, not a cause.
    return live.endedNs > 0 && (e.teardownNs == 0 || live.endedNs < e.teardownNs);
}

std::optional<std::uint32_t> Judge::firstEnded(const std::function<bool(const RankLiveness&)>& said) const
{
    std::optional<std::uint32_t> first;
    for (std::uint32_t r = 0; r < m_world; ++r) {
        const RankLiveness& live = liveness(r);
        if (endedBeforeTeardown(live) && said(live) && (!first || live.endedNs < liveness(*first).endedNs))
            first = r;
    }
    return first;
}

std::optional<store::SessionOutcome> Judge::ownVerdict() const
{
    const auto failedByItself = [](const RankLiveness& live) {
        return live.state == wire::RankState::Failed && live.detail != wire::kCommunicationFailedStatus;
    };
    if (const auto rank = firstEnded(failedByItself))
        return failedRank(*rank, failedRankCause(*rank));
    // Its peers would wait for it in their next collective for ever, heartbeats and all.
    const auto finishedEarly = [this](const RankLiveness& live) {
        return live.state == wire::RankState::Finished && live.completedSteps < e.lastStep;
    };
    if (const auto rank = firstEnded(finishedEarly))
        return failedRank(*rank, rankWords(*rank) + " finished after step " +
                                     std::to_string(liveness(*rank).completedSteps) + " of " +
                                     std::to_string(e.lastStep) + " while the others went on");
    return std::nullopt;
}

RunningVerdict Judge::whileRunning() const
{
    RunningVerdict verdict;
    if (std::optional<store::SessionOutcome> own = ownVerdict()) {
        verdict.outcome = widenedToHost(*own);
    } else if (const auto rank = firstEnded(communicationFailed);
               rank && e.nowNs - liveness(*rank).endedNs > e.heartbeatTimeoutNs) {
        // A rank whose collective failed points at a peer that ended first, and asked the launcher
        // to end the job, whose report will say who: only if the job goes on regardless does the
        // engine decide.
        verdict.outcome = widenedToHost(launcherVerdict(std::nullopt));
    } else {
        // Of the ranks silent for the timeout, the one that fell silent first.
        std::optional<std::uint32_t> silent;
        for (std::uint32_t r = 0; r < m_world; ++r) {
            const RankLiveness& live = liveness(r);
            if (live.everHeard && !wire::isFinal(live.state) && e.nowNs - live.lastHeardNs > e.heartbeatTimeoutNs &&
                (!silent || live.lastHeardNs < liveness(*silent).lastHeardNs))
                silent = r;
        }
        if (silent) {
            const std::optional<std::vector<Fate>> fates = fatesAfter(*silent);
            if (!fates)
                return verdict;
            if (std::optional<store::SessionOutcome> network = networkVerdict(*fates)) {
                verdict.outcome = network;
                verdict.networkLost = true;
                for (std::uint32_t r = 0; r < m_world; ++r)
                    if ((*fates)[r] == Fate::Silent)
                        verdict.unanswering.push_back(r);
            } else {
                const std::string state = silentRankState(*silent);
                const std::string cause = rankWords(*silent) + " sent no heartbeat for " +
                                          seconds(e.nowNs - liveness(*silent).lastHeardNs) +
                                          " s: " + (state.empty() ? "it hung, was stopped or was killed" : state);
                verdict.unanswering = hostLostWith(*silent, &*fates);
                verdict.outcome =
                    verdict.unanswering.empty() ? failedRank(*silent, cause) : hostVerdict(verdict.unanswering, cause);
            }
        } else {
            for (std::uint32_t r = 0; r < m_world && e.startTimedOut; ++r)
                if (!liveness(r).everHeard) {
                    verdict.outcome = failedRank(r, rankWords(r) + " never reported in: check that the agents can "
                                                                   "reach the collector (--collector)");
                    break;
                }
        }
    }
    verdict.pastAnswering = verdict.unanswering;
    if (verdict.outcome && verdict.pastAnswering.empty() && verdict.outcome->failedRank >= 0) {
        const auto rank = std::uint32_t(verdict.outcome->failedRank);
        verdict.pastAnswering = hostLostWith(rank);
        if (verdict.pastAnswering.empty())
            verdict.pastAnswering.push_back(rank);
    }
    return verdict;
}

std::optional<std::vector<Judge::Fate>> Judge::fatesAfter(std::uint32_t silent) const
{
    // A rank that goes on is heard at least once a heartbeat interval (well within the timeout), so
    // one heard after `silent` had been quiet for the timeout was not silenced with it; one quiet
    // for the timeout itself went with it. A lost host's or network's ranks all fall quiet within an
    // interval of each other, so this is known at most one timeout after `silent` was found.
    const std::int64_t wentOnAfter = liveness(silent).lastHeardNs + e.heartbeatTimeoutNs;
    std::vector<Fate> fates(m_world, Fate::NotHeard);
    for (std::uint32_t r = 0; r < m_world; ++r) {
        const RankLiveness& live = liveness(r);
        if (!live.everHeard)
            continue;
        if ((wire::isFinal(live.state) && endedBeforeTeardown(live)) || live.lastHeardNs >= wentOnAfter)
            fates[r] = Fate::WentOn;
        else if (e.nowNs - live.lastHeardNs > e.heartbeatTimeoutNs)
            fates[r] = Fate::Silent;
        else
            return std::nullopt;
    }
    return fates;
}

std::optional<store::SessionOutcome> Judge::networkVerdict(const std::vector<Fate>& fates) const
{
    std::map<std::string, std::vector<std::uint32_t>> byHost;
    std::int64_t quietSinceNs = e.nowNs;
    for (std::uint32_t r = 0; r < m_world; ++r) {
        if (fates[r] == Fate::WentOn)
            return std::nullopt;
        if (fates[r] == Fate::Silent) {
            byHost[liveness(r).host].push_back(r);
            quietSinceNs = std::min(quietSinceNs, liveness(r).lastHeardNs);
        }
    }
    if (byHost.size() < 2 || byHost.count(""))
        return std::nullopt;
    std::string hosts;
    std::size_t ranks = 0;
    std::set<char> states;
    bool allSeen = true;
    for (const auto& [host, onHost] : byHost) {
        hosts += (hosts.empty() ? "" : ", ") + host + ": ranks " + rankRanges(onHost);
        ranks += onHost.size();
        for (std::uint32_t r : onHost) {
            const std::optional<char> state = processState(r);
            allSeen = allSeen && state.has_value();
            if (state)
                states.insert(stateGroup(*state));
        }
    }
    const std::string together = "all " + std::to_string(ranks) + " ranks fell silent together (none heard for " +
                                 seconds(e.nowNs - quietSinceNs) + " s)";
    const std::string check = "check this machine's network to the hosts (its interface, the switch, a firewall)";
    // What the engine sees of the processes, when this machine started them (test hosts); remote
    // hosts' are out of its sight, and a silence of every host at once is then the network's.
    if (allSeen && states == std::set<char>{'T'})
        return failedJob("every host went silent together (" + hosts + "): " + together +
                         ", and their processes are stopped: the hosts froze, or the job was stopped (SIGSTOP)");
    if (allSeen && states == std::set<char>{'?'})
        return failedJob("every host went silent together (" + hosts + "): " + together +
                         ", and their processes are gone: the hosts died, or the job was killed");
    const std::string seen = !allSeen                        ? "the hosts' processes are out of this machine's sight"
                             : states == std::set<char>{'R'} ? "their processes run but none is heard"
                                                             : "their processes are not all running, nor all gone";
    return failedJob("the engine lost its network to every host (" + hosts + "): " + together + "; " + seen + ": " +
                     check);
}

std::vector<std::uint32_t> Judge::hostLostWith(std::uint32_t rank, const std::vector<Fate>* fates) const
{
    // A host that goes (dies, freezes, loses its network) takes all its ranks at once, none with a
    // last word, while the others go on: they are still heard, or said their own last word (the
    // launcher stopping them). A rank that dies alone leaves its neighbours on the host talking.
    const std::string& host = liveness(rank).host;
    if (host.empty())
        return {};
    std::vector<std::uint32_t> lost;
    bool othersWentOn = false;
    for (std::uint32_t r = 0; r < m_world; ++r) {
        const RankLiveness& live = liveness(r);
        const bool spoke = wire::isFinal(live.state) && endedBeforeTeardown(live);
        const bool wentOn = fates ? (*fates)[r] == Fate::WentOn
                                  : live.everHeard && (spoke || e.nowNs - live.lastHeardNs <= e.heartbeatTimeoutNs);
        if (live.host == host) {
            if (spoke || !live.everHeard || (fates && wentOn))
                return {};
            lost.push_back(r);
        } else if (wentOn) {
            othersWentOn = true;
        }
    }
    if (lost.size() < 2 || !othersWentOn)
        return {};
    return lost;
}

store::SessionOutcome Judge::hostVerdict(const std::vector<std::uint32_t>& lost, const std::string& rankCause) const
{
    const std::string& host = liveness(lost.front()).host;
    // What the engine sees of the processes, when this machine started them (test hosts, or a host
    // that is this one); a remote host's are out of its sight. Processes killed together read as
    // gone together, however far each has got on its way out.
    std::set<char> states;
    bool allSeen = true;
    std::string each;  // rank by rank, when they disagree
    for (std::uint32_t r : lost) {
        const std::optional<char> state = processState(r);
        allSeen = allSeen && state.has_value();
        if (state)
            states.insert(stateGroup(*state));
        each += (each.empty() ? "" : ", ") + std::to_string(r) + " " +
                (!state          ? "out of sight"
                 : *state == '?' ? "gone"
                                 : std::string("in state ") + *state);
    }
    std::string seen = "the host died, froze or lost its network";
    if (states.size() > 1 || (!allSeen && !states.empty()))
        seen += " (its ranks' processes: " + each + ")";
    if (allSeen && states.size() == 1) {
        switch (*states.begin()) {
        case '?':
            seen = "its processes are gone: the node died";
            break;
        case 'T':
            seen = "its processes are stopped: the host froze";
            break;
        case 'R':
            seen = "its processes run but are not heard: its network is down";
            break;
        default:
            seen = silentRankState(lost.front());
            break;
        }
    }
    return failedRank(lost.front(), "host " + host + " was lost with all its ranks (" + rankRanges(lost) +
                                        "), silent together while the other hosts went on: " + seen + " (" + rankCause +
                                        ")");
}

store::SessionOutcome Judge::widenedToHost(store::SessionOutcome verdict) const
{
    if (verdict.outcome != store::Outcome::Failed || verdict.failedRank < 0)
        return verdict;
    const std::vector<std::uint32_t> lost = hostLostWith(std::uint32_t(verdict.failedRank));
    return lost.empty() ? verdict : hostVerdict(lost, verdict.cause);
}

std::optional<store::SessionOutcome> Judge::unreachableHostVerdict() const
{
    const LauncherReport& report = e.launcher;
    if (report.unreachableHost.empty())
        return std::nullopt;
    // A host whose ranks were heard was reached; what became of it later is the heartbeats' to say.
    for (std::uint32_t r = 0; r < m_world; ++r)
        if (liveness(r).everHeard && liveness(r).host == report.unreachableHost)
            return std::nullopt;
    const std::string& host = report.unreachableHost;
    std::string cause = "host " + host + " cannot be reached";
    if (!report.unreachableFrom.empty())
        cause += " from " + report.unreachableFrom + ", where mpirun runs";
    cause += ": " + report.unreachableWhy + (report.daemonsNotStarted ? ", so the job did not start" : "") + "; ";
    if (!report.unreachableFrom.empty())
        cause += "check that " + host + " has a network link and a route to " + report.unreachableFrom +
                 " (and no firewall between them), that Open MPI's oob_tcp_if_include / btl_tcp_if_include name a "
                 "network both are on, or leave " +
                 host + " out of the hostfile";
    else
        cause += "check that " + host + " is up and reachable from this machine (ssh " + host +
                 " true), or leave it out of the hostfile";
    return failedJob(cause);
}

store::SessionOutcome Judge::rankExitVerdict(const RankExit& exited, const std::string& ended) const
{
    const auto rank = std::uint32_t(exited.rank);
    const RankLiveness& live = liveness(rank);
    if (live.state == wire::RankState::Terminated)
        return failedRank(rank, terminatedRankCause(rank));
    const ExitStatus& status = exited.status;
    std::string cause =
        rankWords(rank) + (status.signal != 0 ? " was killed by signal " + std::to_string(status.signal) + " (" +
                                                    signalWords(status.signal) + ")"
                                              : " exited with status " + std::to_string(status.code));
    cause += live.everHeard ? " after its last heartbeat, at step " + std::to_string(live.completedSteps) + " of " +
                                  std::to_string(e.lastStep)
                            : std::string(" before reporting anything");
    if (!exited.lastStderr.empty())
        cause += " (its last stderr line: " + exited.lastStderr + ")";
    if (status.signal == SIGKILL)  // nothing but the kernel or another process sends it
        cause += ": by hand, or by the out-of-memory killer (see dmesg)";
    return failedRank(rank, cause + ended);
}

store::SessionOutcome Judge::launcherVerdict(const std::optional<ExitStatus>& exit) const
{
    const std::string& launcher = e.launcherName;
    if (std::optional<store::SessionOutcome> own = ownVerdict())
        return *own;
    if (std::optional<store::SessionOutcome> unreachable = unreachableHostVerdict())
        return *unreachable;
    const std::string ended = exit ? "; " + launcher + " " + exit->describe() : std::string();
    // A launch command's shell says how its rank ended, unless it was killed with it (mpirun then
    // saw the shell end on a signal, and says so).
    if (const std::optional<RankExit>& exited = e.launcher.firstRankExit;
        exited && e.launcher.signal == 0 && std::uint32_t(exited->rank) < m_world)
        return rankExitVerdict(*exited, ended);
    if (e.launcher.rank >= 0 && std::uint32_t(e.launcher.rank) < m_world) {
        const auto rank = std::uint32_t(e.launcher.rank);
        if (liveness(rank).state == wire::RankState::Terminated)
            return failedRank(rank, terminatedRankCause(rank));
        std::string cause = rankWords(rank) + " " + e.launcher.describe();
        if (e.launcher.improper)
            cause += " (its last heartbeat said step " + std::to_string(liveness(rank).completedSteps) + " of " +
                     std::to_string(e.lastStep) + ")";
        return failedRank(rank, cause);
    }
    const std::string leftRanks = e.leftRanksStopped ? "; the ranks it left running were stopped" : "";
    // The engine never signals a launcher before it has a verdict, so this signal came from elsewhere.
    if (exit && exit->signal != 0) {
        if (e.oneDevice)  // the agent is rank 0 itself
            return failedRank(0, rankWords(0) + " " + exit->describe());
        if (e.launcherCrashed)
            return failedJob(launcher + " " + e.launcher.crashWords() + " (its report is in the session's log)" +
                             leftRanks);
        return failedJob(launcher + " was killed by signal " + std::to_string(exit->signal) + " (" +
                         signalWords(exit->signal) + "), which the engine did not send" + leftRanks);
    }
    // Slurm ended the step: a user's scancel is a stop, its time limit a failure.
    if (!e.launcher.slurmCancelledAt.empty())
        return e.launcher.slurmTimeLimit
                   ? failedJob("the Slurm job reached its time limit at " + e.launcher.slurmCancelledAt +
                               " (raise it with sbatch/salloc --time)")
                   : store::SessionOutcome{store::Outcome::Stopped,
                                           "cancelled in Slurm (scancel) at " + e.launcher.slurmCancelledAt, -1, 0};
    std::vector<std::uint32_t> heard, terminated;
    for (std::uint32_t r = 0; r < m_world; ++r)
        if (liveness(r).everHeard) {
            heard.push_back(r);
            if (liveness(r).state == wire::RankState::Terminated && endedBeforeTeardown(liveness(r)))
                terminated.push_back(r);
        }
    if (heard.size() > 1 && terminated.size() == heard.size()) {
        const int signal = liveness(terminated.front()).detail;
        return failedJob("every rank was terminated by signal " + std::to_string(signal) + " (" + signalWords(signal) +
                         "), which the engine did not send: the job was ended from outside (" + launcher +
                         " signalled, or the whole job: kill, scancel, a time limit)");
    }
    // Without the launcher's end, a rank counts as gone only once it has been silent for the timeout.
    // A host lost whole outweighs a rank elsewhere that the launcher's teardown ended before it could
    // speak (on a busy machine it may not get to): the lost host's rank is named, widened to the host.
    std::optional<std::uint32_t> silent;
    for (std::uint32_t r : heard) {
        if (endedBeforeTeardown(liveness(r)) || (!exit && e.nowNs - liveness(r).lastHeardNs <= e.heartbeatTimeoutNs))
            continue;
        const bool hostLost = !hostLostWith(r).empty();
        if (!silent || hostLost)
            silent = r;
        if (hostLost)
            break;
    }
    if (silent)
        return failedRank(*silent,
                          rankWords(*silent) + " ended without a word (killed, e.g. SIGKILL or out of memory)" + ended);
    if (const auto rank =
            firstEnded([](const RankLiveness& live) { return live.state == wire::RankState::Terminated; }))
        return failedRank(*rank, terminatedRankCause(*rank));
    if (const auto rank = firstEnded(communicationFailed))
        return failedRank(*rank, failedRankCause(*rank) + " (a peer may have ended first; see the session's log)");
    return failedJob(launcher + (exit ? " " + exit->describe() : std::string(" did not end the job")) +
                     " (its output is in the session's log)" + e.rootHint);
}

store::SessionOutcome Judge::onExit(const ExitStatus& exit) const
{
    if (exit.ok()) {
        const bool allFinished = std::all_of(e.ranks.begin(), e.ranks.end(), [](const RankLiveness& live) {
            return live.state == wire::RankState::Finished;
        });
        return {store::Outcome::Completed,
                allFinished ? "" : "the job exited normally but not every rank's last heartbeat arrived", -1, 0};
    }
    return widenedToHost(launcherVerdict(exit));
}

}  // namespace

RunningVerdict verdictWhileRunning(const RunEvidence& evidence) { return Judge(evidence).whileRunning(); }

store::SessionOutcome verdictOnExit(const RunEvidence& evidence, const ExitStatus& exit)
{
    return Judge(evidence).onExit(exit);
}

}  // namespace meshbench::service
