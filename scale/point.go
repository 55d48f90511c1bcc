package scale

// Point is one measurement at one cluster size: named values (see each
// measurement's metrics for their names and units).
type Point struct {
	N      int
	Values map[string]float64
}

// Metric names one value of a Point for the table and the plots.
type Metric struct {
	Key, Title, Unit string
}

// Series is one measurement over several sizes.
type Series struct {
	Name    string
	Metrics []Metric
	Points  []Point
	// Notes are facts about the run (what the reference was, what could
	// not be measured) that the report prints under the table.
	Notes []string
}
