// Must NOT compile: launcher/config may not depend on launcher/agent, and its target does not
// link it, so the agent's header is not on this target's include path. tests/layering checks
// that building this fails for exactly that reason (cmake/DdprunComponent.cmake).
#include "launcher/agent/agent.h"

int main() { return 0; }
