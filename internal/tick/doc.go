// Package tick is the platform's one periodic loop: Repeat calls a
// function at every tick of a period, and at every signal on an optional
// wake channel, until its context ends or the function asks to stop.
//
// Guarantees: calls never overlap (the next wait starts when a call
// returns, and ticks missed meanwhile are dropped, as time.Ticker drops
// them); no call starts once ctx has ended; the first
// call comes a full period (or a signal) after Repeat starts, never at
// once. Signal never blocks: a signal already pending stands for a new one.
package tick
