#pragma once
// The replay bar: play/pause, speed (0.25x to 100x), a seek slider over steps, close, and an inline
// status. It emits requests by source; with setClient() it also sends them to the engine
// (pause/resume/speed/seek/close) and follows the replay on the live feed (step position,
// playing/ended), so the main window only creates it, calls setClient() and openSession().

#include <nlohmann/json.hpp>

#include <QString>
#include <QWidget>

class QComboBox;
class QLabel;
class QSlider;
class QToolButton;

namespace meshbench::app {

class EngineClient;

class ReplayControls : public QWidget {
    Q_OBJECT

public:
    explicit ReplayControls(QWidget* parent = nullptr);

    void setClient(EngineClient* client);
    static QList<double> speeds();

    QString source() const { return m_source; }
    QString sessionPath() const { return m_path; }
    int steps() const { return m_steps; }
    int position() const;
    bool isPlaying() const { return m_playing; }
    double speed() const;
    QString statusText() const;

    QToolButton* playButton() const { return m_play; }
    QComboBox* speedBox() const { return m_speed; }
    QSlider* slider() const { return m_slider; }

public slots:
    // Asks the engine to replay `path` (with the speed chosen); on its answer the bar takes the
    // replay's source and emits replayStarted. A session that cannot be read, or a refusal, is
    // shown in the bar's status. Needs setClient().
    void openSession(const QString& path);
    // Takes a replay the engine already plays (enables the bar, slider over 0..steps).
    void setReplay(const QString& source, int steps);
    void clearReplay();
    void setPosition(int step);
    void setPlaying(bool playing);

signals:
    void pauseRequested(const QString& source);
    void resumeRequested(const QString& source);
    void speedRequested(const QString& source, double speed);
    void seekRequested(const QString& source, int step);
    void closeRequested(const QString& source);
    void replayStarted(const QString& source, const QString& sessionPath);

private:
    void togglePlay();
    void takeOpenedReplay(const nlohmann::json& reply, const QString& path, int steps);
    void showStatus(const QString& text);
    // Sends an op for the current source to the engine; a refusal shows in the status.
    void send(nlohmann::json request);

    EngineClient* m_client = nullptr;
    QString m_source, m_path;
    int m_steps = 0;
    bool m_playing = false;
    bool m_ended = false;
    QToolButton* m_play = nullptr;
    QComboBox* m_speed = nullptr;
    QSlider* m_slider = nullptr;
    QLabel* m_step = nullptr;
    QToolButton* m_close = nullptr;
    QLabel* m_status = nullptr;
};

}  // namespace meshbench::app
