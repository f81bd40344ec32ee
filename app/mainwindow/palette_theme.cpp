#include "palette_theme.h"

#include <QApplication>
#include <QPalette>
#include <QStyle>
#include <QStyleFactory>

namespace meshbench::app {

void applyTheme(Theme theme)
{
    QApplication::setStyle(QStyleFactory::create("Fusion"));
    if (theme == Theme::Light) {
        QApplication::setPalette(QApplication::style()->standardPalette());
        return;
    }
    // A dark palette with light text; disabled text stays readable but clearly dimmer.
    QPalette p;
    const QColor window(37, 40, 45), base(28, 30, 34), text(226, 228, 232), dim(130, 134, 140);
    p.setColor(QPalette::Window, window);
    p.setColor(QPalette::WindowText, text);
    p.setColor(QPalette::Base, base);
    p.setColor(QPalette::AlternateBase, window);
    p.setColor(QPalette::ToolTipBase, base);
    p.setColor(QPalette::ToolTipText, text);
    p.setColor(QPalette::PlaceholderText, dim);
    p.setColor(QPalette::Text, text);
    p.setColor(QPalette::Button, window);
    p.setColor(QPalette::ButtonText, text);
    p.setColor(QPalette::BrightText, QColor(255, 110, 110));
    p.setColor(QPalette::Light, QColor(70, 74, 80));
    p.setColor(QPalette::Midlight, QColor(55, 58, 64));
    p.setColor(QPalette::Mid, QColor(48, 51, 56));
    p.setColor(QPalette::Dark, QColor(20, 21, 24));
    p.setColor(QPalette::Shadow, Qt::black);
    p.setColor(QPalette::Highlight, QColor(61, 130, 246));
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::Link, QColor(96, 165, 250));
    for (QPalette::ColorRole role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
        p.setColor(QPalette::Disabled, role, dim);
    QApplication::setPalette(p);
}

QString themeName(Theme theme) { return theme == Theme::Dark ? QStringLiteral("dark") : QStringLiteral("light"); }

}  // namespace meshbench::app
