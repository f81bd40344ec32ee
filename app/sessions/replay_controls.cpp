#include "replay_controls.h"

#include "client/engine_client.h"
#include "store/session_store.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPointer>
#include <QSlider>
#include <QStyle>
#include <QToolButton>

namespace meshbench::app {

ReplayControls::ReplayControls(QWidget* parent)
    : QWidget(parent), m_play(new QToolButton(this)), m_speed(new QComboBox(this)),
      m_slider(new QSlider(Qt::Horizontal, this)), m_step(new QLabel(this)), m_close(new QToolButton(this)),
      m_status(new QLabel(this))
{
    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    m_play->setToolTip(tr("Play / pause the replay (Space)"));
    m_play->setShortcut(Qt::Key_Space);
    for (double s : speeds())
        m_speed->addItem(QString::number(s) + QStringLiteral("×"), s);
    m_speed->setCurrentIndex(int(speeds().indexOf(1.0)));
    m_speed->setToolTip(tr("Replay speed, times real time"));
    m_slider->setToolTip(tr("Seek: the replay restarts at the chosen step"));
    m_slider->setPageStep(10);
    m_close->setIcon(style()->standardIcon(QStyle::SP_DialogCloseButton));
    m_close->setToolTip(tr("Close the replay"));
    m_status->setForegroundRole(QPalette::PlaceholderText);
    layout->addWidget(m_play);
    layout->addWidget(m_speed);
    layout->addWidget(m_slider, 1);
    layout->addWidget(m_step);
    layout->addWidget(m_close);
    layout->addWidget(m_status);

    connect(m_play, &QToolButton::clicked, this, &ReplayControls::togglePlay);
    connect(m_speed, &QComboBox::activated, this, [this] { emit speedRequested(m_source, speed()); });
    // A drag seeks once, on release; clicks, wheel and keys seek at once.
    connect(m_slider, &QSlider::sliderReleased, this, [this] { emit seekRequested(m_source, m_slider->value()); });
    connect(m_slider, &QSlider::actionTriggered, this, [this](int action) {
        if (action != QAbstractSlider::SliderMove)
            emit seekRequested(m_source, m_slider->sliderPosition());
    });
    connect(m_slider, &QSlider::valueChanged, this,
            [this](int step) { m_step->setText(tr("step %1 / %2").arg(step).arg(m_steps)); });
    connect(m_close, &QToolButton::clicked, this, [this] {
        const QString source = m_source;
        clearReplay();
        emit closeRequested(source);
    });
    clearReplay();
}

QList<double> ReplayControls::speeds() { return {0.25, 0.5, 1, 2, 5, 10, 25, 50, 100}; }

int ReplayControls::position() const { return m_slider->value(); }

double ReplayControls::speed() const { return m_speed->currentData().toDouble(); }

QString ReplayControls::statusText() const { return m_status->text(); }

void ReplayControls::showStatus(const QString& text)
{
    m_status->setText(text);
    m_status->setToolTip(text);
}

void ReplayControls::setClient(EngineClient* client)
{
    if (m_client)
        m_client->disconnect(this);
    m_client = client;
    if (!client)
        return;
    connect(this, &ReplayControls::pauseRequested, client, [this] { send({{"op", "pause"}}); });
    connect(this, &ReplayControls::resumeRequested, client, [this] { send({{"op", "resume"}}); });
    connect(this, &ReplayControls::speedRequested, client, [this](const QString&, double s) {
        send({{"op", "speed"}, {"speed", s}});
    });
    connect(this, &ReplayControls::seekRequested, client, [this](const QString&, int step) {
        send({{"op", "seek"}, {"step", step}});
    });
    connect(this, &ReplayControls::closeRequested, client, [this](const QString& source) {
        m_client->request({{"op", "close"}, {"source", source.toStdString()}}, [](const nlohmann::json&) {});
    });
    connect(client, &EngineClient::stepArrived, this, [this](const QString& source, const nlohmann::json& step) {
        if (source == m_source && step.contains("step") && step["step"].is_number_integer())
            setPosition(step["step"].get<int>());
    });
    connect(client, &EngineClient::jobChanged, this, [this](const QString& source, const nlohmann::json& status) {
        if (source != m_source)
            return;
        const std::string state = status.value("state", "");
        if (state == "ended") {
            m_ended = true;
            setPlaying(false);
            showStatus(tr("ended"));
        } else if (state == "failed") {
            setPlaying(false);
            showStatus(tr("failed: %1").arg(QString::fromStdString(status.value("cause", ""))));
        } else if (state == "playing" || state == "seeking") {
            m_ended = false;
        }
    });
}

void ReplayControls::send(nlohmann::json request)
{
    if (!m_client || m_source.isEmpty())
        return;
    request["source"] = m_source.toStdString();
    const QString op = QString::fromStdString(request["op"]);
    m_client->request(std::move(request), [self = QPointer(this), op](const nlohmann::json& reply) {
        if (self && !reply.value("ok", false))
            self->showStatus(tr("%1: %2").arg(op, QString::fromStdString(reply.value("error", ""))));
    });
}

void ReplayControls::openSession(const QString& path)
{
    if (!m_client) {
        showStatus(tr("no engine to replay with"));
        return;
    }
    int steps = 0;
    try {
        steps = store::SessionReader(path.toStdString()).summary().steps;
    } catch (const std::exception& e) {
        showStatus(QString::fromUtf8(e.what()));
        return;
    }
    showStatus(tr("opening…"));
    m_client->request({{"op", "open"}, {"session", path.toStdString()}, {"speed", speed()}},
                      [self = QPointer(this), path, steps](const nlohmann::json& reply) {
                          if (self)
                              self->takeOpenedReplay(reply, path, steps);
                      });
}

void ReplayControls::takeOpenedReplay(const nlohmann::json& reply, const QString& path, int steps)
{
    if (!reply.value("ok", false)) {
        showStatus(QString::fromStdString(reply.value("error", "")));
        return;
    }
    if (!m_source.isEmpty())  // one replay at a time: the previous one ends
        emit closeRequested(m_source);
    m_path = path;
    setReplay(QString::fromStdString(reply.value("replay", "")), steps);
    emit replayStarted(m_source, m_path);
}

void ReplayControls::setReplay(const QString& source, int steps)
{
    m_source = source;
    m_steps = steps;
    m_ended = false;
    {
        const QSignalBlocker block(m_slider);
        m_slider->setRange(0, steps);
        m_slider->setValue(0);
    }
    m_step->setText(tr("step %1 / %2").arg(0).arg(steps));
    for (QWidget* w : {static_cast<QWidget*>(m_play), static_cast<QWidget*>(m_speed), static_cast<QWidget*>(m_slider),
                       static_cast<QWidget*>(m_close)})
        w->setEnabled(true);
    showStatus(source);
    setPlaying(true);
}

void ReplayControls::clearReplay()
{
    m_source.clear();
    m_path.clear();
    m_steps = 0;
    {
        const QSignalBlocker block(m_slider);
        m_slider->setRange(0, 0);
    }
    m_step->setText(tr("no replay"));
    for (QWidget* w : {static_cast<QWidget*>(m_play), static_cast<QWidget*>(m_speed), static_cast<QWidget*>(m_slider),
                       static_cast<QWidget*>(m_close)})
        w->setEnabled(false);
    setPlaying(false);
}

void ReplayControls::setPosition(int step)
{
    if (m_slider->isSliderDown())  // the user is choosing a step: the feed must not move it
        return;
    const QSignalBlocker block(m_slider);
    m_slider->setValue(step);
    m_step->setText(tr("step %1 / %2").arg(step).arg(m_steps));
}

void ReplayControls::setPlaying(bool playing)
{
    m_playing = playing;
    m_play->setIcon(style()->standardIcon(playing ? QStyle::SP_MediaPause : QStyle::SP_MediaPlay));
    m_play->setText(playing ? tr("Pause") : tr("Play"));
}

void ReplayControls::togglePlay()
{
    if (m_source.isEmpty())
        return;
    if (m_playing) {
        setPlaying(false);
        emit pauseRequested(m_source);
    } else if (m_ended) {  // an ended replay waits for a seek: play it again from the start
        m_ended = false;
        setPlaying(true);
        setPosition(0);
        emit seekRequested(m_source, 0);
    } else {
        setPlaying(true);
        emit resumeRequested(m_source);
    }
}

}  // namespace meshbench::app
