use super::*;

fn settings(count: usize, seed: u64) -> Settings {
    Settings { count, seed, attempt_share: 0.3, heldout_share: 0.2 }
}

#[test]
fn the_same_seed_gives_the_same_set_and_another_seed_another() {
    let a = generate(&settings(40, 7));
    assert_eq!(a, generate(&settings(40, 7)));
    let b = generate(&settings(40, 8));
    assert!(a.iter().zip(&b).filter(|(x, y)| x.problem != y.problem).count() > 30);
    // Problem i depends on the seed and i only.
    assert_eq!(generate(&settings(10, 7))[..], a[..10]);
}

#[test]
fn every_family_takes_its_turn_and_difficulties_are_graded() {
    let set = generate(&settings(200, 1));
    for f in Family::ALL {
        assert!(set.iter().any(|p| p.family == f), "{f:?}");
    }
    for d in 1..=5 {
        assert!(set.iter().any(|p| p.difficulty == d), "no problem of difficulty {d}");
    }
    let heldout = set.iter().filter(|p| p.split == Split::Heldout).count();
    assert!((20..=60).contains(&heldout), "{heldout}");
    let attempts = set.iter().filter(|p| p.attempt.is_some()).count();
    assert!((35..=85).contains(&attempts), "{attempts}");
}

#[test]
fn every_mistake_a_family_offers_changes_its_solution() {
    for i in 0..400 {
        let family = Family::ALL[i % Family::ALL.len()];
        let d = families::draw(family, &mut Rng::for_item(3, i, 1));
        assert!(!d.mistakes.is_empty());
        for m in d.mistakes.iter().chain(&syntax_slips(&d.solution)) {
            let wrong = m.apply(&d.solution);
            assert!(
                wrong.is_some(),
                "{family:?} {:?} does not apply:\n{:?}\n{}",
                m.flaw,
                m.edits,
                d.solution
            );
        }
        assert!(
            d.problem.contains("class Model(nn.Module)")
                && d.solution.contains("class ModelNew(nn.Module)")
        );
        for (n, v) in d.dims.names.iter().zip(&d.dims.full) {
            assert!(d.problem.contains(&format!("\n{n} = {v}\n")), "{n}");
        }
    }
}

#[test]
fn a_written_set_is_a_valid_suite() {
    let dir = tempfile::tempdir().unwrap();
    let set = generate(&settings(30, 5));
    let refs: Vec<&SynthProblem> = set.iter().collect();
    write::write_set(dir.path(), &refs, 5).unwrap();
    let suite = tritonforge_suite::Suite::load(dir.path()).unwrap();
    assert_eq!(suite.entries.len(), 30);
    assert_eq!(suite.lint(), Vec::<String>::new());
    let e = suite.find("SYN-00001").unwrap();
    assert_eq!(e.meta.difficulty, Some(set[0].difficulty));
    assert_eq!(e.meta.family.as_deref(), Some("elementwise"));
    let written =
        std::fs::read_to_string(dir.path().join("solutions").join(format!("{}.py", set[0].key())))
            .unwrap();
    assert_eq!(written, set[0].solution);
}
