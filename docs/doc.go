// Package docs holds no code: its tests keep the documentation in this
// folder true to the tree (docs/architecture.md names every top-level
// folder and every Go package, and names none that is gone).
package docs
