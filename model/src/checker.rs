//! A small exhaustive checker: breadth-first over every reachable state, invariants on each,
//! and liveness as "from every reachable state the goal is still reachable".
//!
//! Why not `stateright`: its `eventually` properties are checked on the ends of acyclic paths
//! only (its docs: a property not met by a cycle-closing edge is ignored, a false negative),
//! and this model's time and redeliveries make every path cyclic. Liveness under fair
//! scheduling needs the whole graph: on a finite graph, if the goal is reachable from every
//! reachable state, a strongly fair scheduler (every action enabled infinitely often is taken
//! infinitely often) reaches it. That check is the backward search at the end of [`check`].
//! It also keeps the workspace's lock free of a web server and five other crates.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// A named property: a test of one state.
pub type Property<S> = (&'static str, fn(&S) -> bool);

/// A reached state, the parent it was first reached from (and the action), its depth.
type Node<M> = (
    <M as Model>::State,
    Option<(usize, <M as Model>::Action)>,
    usize,
);

/// A transition system.
pub trait Model {
    /// A state: compared and hashed whole (keep it canonical).
    type State: Clone + Eq + Hash + std::fmt::Debug;
    /// What takes one state to the next (for counterexample traces).
    type Action: Clone + std::fmt::Debug;

    /// The initial states.
    fn init_states(&self) -> Vec<Self::State>;
    /// Every successor of `state`, with the action that leads there.
    fn next_states(&self, state: &Self::State, out: &mut Vec<(Self::Action, Self::State)>);
    /// The safety properties: a name and a test every reachable state must pass.
    fn invariants(&self) -> Vec<Property<Self::State>>;
    /// The liveness properties: a name and a goal that must stay reachable from every
    /// reachable state.
    fn goals(&self) -> Vec<Property<Self::State>>;
}

/// A property that does not hold, with the shortest path to a state that shows it.
#[derive(Debug)]
pub struct Violation<M: Model> {
    /// The property's name.
    pub property: &'static str,
    /// The initial state.
    pub init: M::State,
    /// The actions from it, and the state each led to.
    pub trace: Vec<(M::Action, M::State)>,
}

/// What a check found.
#[derive(Debug)]
pub struct Report<M: Model> {
    /// Distinct states reached.
    pub states: usize,
    /// Transitions taken.
    pub transitions: usize,
    /// The longest shortest path from an initial state.
    pub depth: usize,
    /// The properties that do not hold (the first counterexample of each).
    pub violations: Vec<Violation<M>>,
}

impl<M: Model> Report<M> {
    /// Whether `property` was found violated.
    pub fn violated(&self, property: &str) -> bool {
        self.violations.iter().any(|v| v.property == property)
    }
}

/// Explores every state reachable from `model`'s initial states, up to `max_states` (a guard:
/// past it the check panics rather than run for ever).
pub fn check<M: Model>(model: &M, max_states: usize) -> Report<M> {
    let invariants = model.invariants();
    let goals = model.goals();
    let mut index: HashMap<M::State, usize> = HashMap::new();
    // Per state: its parent (and the action from it), its depth.
    let mut nodes: Vec<Node<M>> = Vec::new();
    let mut edges: Vec<Vec<usize>> = Vec::new();
    let mut queue = VecDeque::new();
    for s in model.init_states() {
        if !index.contains_key(&s) {
            index.insert(s.clone(), nodes.len());
            queue.push_back(nodes.len());
            nodes.push((s, None, 0));
            edges.push(Vec::new());
        }
    }
    let mut first_bad: Vec<Option<usize>> = vec![None; invariants.len()];
    let mut transitions = 0;
    let mut succ = Vec::new();
    while let Some(i) = queue.pop_front() {
        let state = nodes[i].0.clone();
        for (p, (_, holds)) in invariants.iter().enumerate() {
            if first_bad[p].is_none() && !holds(&state) {
                first_bad[p] = Some(i);
            }
        }
        succ.clear();
        model.next_states(&state, &mut succ);
        for (action, next) in succ.drain(..) {
            transitions += 1;
            let j = match index.get(&next) {
                Some(&j) => j,
                None => {
                    let j = nodes.len();
                    assert!(
                        j < max_states,
                        "more than {max_states} states: bounds too large"
                    );
                    index.insert(next.clone(), j);
                    nodes.push((next, Some((i, action)), nodes[i].2 + 1));
                    edges.push(Vec::new());
                    queue.push_back(j);
                    j
                }
            };
            edges[i].push(j);
        }
    }
    let mut violations = Vec::new();
    for (p, bad) in first_bad.iter().enumerate() {
        if let Some(i) = bad {
            violations.push(trace(invariants[p].0, *i, &nodes));
        }
    }
    if !goals.is_empty() {
        let mut reverse: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (i, out) in edges.iter().enumerate() {
            for &j in out {
                reverse[j].push(i);
            }
        }
        for (name, goal) in &goals {
            // Backward from every goal state: what is not reached cannot reach the goal.
            let mut can = vec![false; nodes.len()];
            let mut stack: Vec<usize> = (0..nodes.len()).filter(|&i| goal(&nodes[i].0)).collect();
            for &i in &stack {
                can[i] = true;
            }
            while let Some(j) = stack.pop() {
                for &i in &reverse[j] {
                    if !can[i] {
                        can[i] = true;
                        stack.push(i);
                    }
                }
            }
            if let Some(stuck) = (0..nodes.len()).find(|&i| !can[i]) {
                violations.push(trace(name, stuck, &nodes));
            }
        }
    }
    Report {
        states: nodes.len(),
        transitions,
        depth: nodes.iter().map(|n| n.2).max().unwrap_or(0),
        violations,
    }
}

fn trace<M: Model>(property: &'static str, mut i: usize, nodes: &[Node<M>]) -> Violation<M> {
    let mut steps = Vec::new();
    while let Some((parent, action)) = &nodes[i].1 {
        steps.push((action.clone(), nodes[i].0.clone()));
        i = *parent;
    }
    steps.reverse();
    Violation {
        property,
        init: nodes[i].0.clone(),
        trace: steps,
    }
}
