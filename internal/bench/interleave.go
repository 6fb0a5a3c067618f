package bench

import "slices"

// RunOrder returns sides in the order run (counted from 1) measures them:
// as given on odd runs, reversed on even ones, so that neither side
// always goes first. sides is not modified.
func RunOrder[S any](run int, sides []S) []S {
	order := slices.Clone(sides)
	if run%2 == 0 {
		slices.Reverse(order)
	}
	return order
}

// Interleaved is what Interleave measured, by side name: every rate, run
// by run, and every side's rate over the baseline's (the first side's),
// run by run.
type Interleaved struct {
	Rates  map[string][]float64
	Ratios map[string][]float64 // all sides but the baseline
}

// Interleave measures each of sides runs times, the sides of a run in
// RunOrder, and returns their rates and their per-run ratios over
// sides[0], by name. After each run, ran (if set) gets the run's ratios.
// It stops at the first error measure returns.
func Interleave[S any](runs int, sides []S, name func(S) string, measure func(run int, side S) (float64, error), ran func(run int, ratios map[string]float64)) (Interleaved, error) {
	res := Interleaved{Rates: map[string][]float64{}, Ratios: map[string][]float64{}}
	for run := 1; run <= runs; run++ {
		got := map[string]float64{}
		for _, side := range RunOrder(run, sides) {
			rate, err := measure(run, side)
			if err != nil {
				return res, err
			}
			got[name(side)] = rate
			res.Rates[name(side)] = append(res.Rates[name(side)], rate)
		}
		ratios := map[string]float64{}
		for _, side := range sides[1:] {
			n := name(side)
			ratios[n] = got[n] / got[name(sides[0])]
			res.Ratios[n] = append(res.Ratios[n], ratios[n])
		}
		if ran != nil {
			ran(run, ratios)
		}
	}
	return res, nil
}
