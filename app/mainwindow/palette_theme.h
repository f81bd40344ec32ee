#pragma once
// The workbench's two palettes. Both are Fusion palettes with enough contrast for text, grid
// lines and the categorical colours of stages and span kinds, which read on either background.

#include <QString>

namespace meshbench::app {

enum class Theme { Light, Dark };

// Applies the Fusion style and the theme's palette to the whole application.
void applyTheme(Theme theme);
QString themeName(Theme theme);

}  // namespace meshbench::app
