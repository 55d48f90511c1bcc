// Package numorstring holds the small value types of the Calico API that are
// written either as a number or as a string: AS numbers (plain or dotted),
// ports (number, range or name), protocols (name or number) and the generic
// Uint8OrString.
package numorstring
