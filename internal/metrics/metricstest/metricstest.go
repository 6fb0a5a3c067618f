package metricstest

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Sample is one gathered counter or gauge: its labels and its value.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Samples gathers g and returns, in gathering order, every counter or gauge
// named name whose labels include each (label, value) pair of match.
func Samples(g prometheus.Gatherer, name string, match ...string) ([]Sample, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	var out []Sample
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			s := Sample{Labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.Labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				s.Value = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				s.Value = m.GetGauge().GetValue()
			default:
				continue
			}
			if matches(s.Labels, match) {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// matches reports whether labels holds every (label, value) pair of match.
func matches(labels map[string]string, match []string) bool {
	for i := 0; i+1 < len(match); i += 2 {
		if labels[match[i]] != match[i+1] {
			return false
		}
	}
	return true
}
