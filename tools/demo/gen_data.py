#!/usr/bin/env python3
"""Synthetic 2WikiMultihopQA-style world for the bundled demo model (deterministic).

Fictional people, films, cities and countries with made-up names built from
syllables. Every name pool is split into train / validation / test parts, so the
entities of the held-out test set never occur in training: the model must copy
answers from the documents. Each question gets its own small random world (the
facts about a name change from question to question), so nothing can be
memorised either.

  python3 tools/demo/gen_data.py --out DIR [--n-val 500] [--n-test 1000]
      writes DIR/val.jsonl, DIR/test.jsonl, DIR/train_sample.jsonl (corpus for
      the tokenizer). Training examples are made on the fly by make_example(
      "train", i), a pure function of (seed, split, i).

Record format (one JSON object per line):
  {"id", "question", "documents": [{"title", "text"}, ...] (shuffled),
   "answers": [str, ...], "hops": 1 or 2, "type": str}
"""
import argparse
import json
import os
import random
import re

SEED = 20250101
SPLITS = ("train", "val", "test")

ONSETS = ["b", "br", "c", "ch", "d", "dr", "f", "fl", "g", "gr", "h", "j", "k", "kr", "l",
          "m", "n", "p", "pr", "r", "s", "sh", "st", "t", "th", "tr", "v", "w", "z", "", ""]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ea", "ou", "y", "ia", "ei"]
CODAS = ["", "", "", "n", "r", "l", "s", "m", "k", "th", "nd", "st", "rn", "x", "v"]

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
GENRES = ["drama", "comedy", "thriller", "western", "horror", "musical", "war", "romance",
          "crime", "science fiction", "adventure", "mystery", "fantasy", "biographical"]
OCCUPATIONS = ["actor", "screenwriter", "film producer", "novelist", "painter", "composer",
               "poet", "singer", "journalist", "cinematographer", "politician", "architect"]
TITLE_NOUNS = ["Night", "Nights", "Affair", "Road", "River", "Garden", "Secret", "Summer",
               "Winter", "House", "Letters", "Storm", "Crown", "Island", "Song", "Bridge",
               "Shadow", "Dream", "Journey", "Harbour", "Promise", "Stranger", "Legacy"]
TITLE_PLURALS = ["Shadows", "Echoes", "Ghosts", "Daughters", "Sons", "Songs", "Lights",
                 "Roses", "Bells", "Children", "Kings", "Wolves"]
CITY_SUFFIXES = ["", "", "", "", "ton", "burg", "ford", "ville", "port", "mouth", "dale"]
COUNTRY_SUFFIXES = ["ia", "ia", "land", "ania", "ica", "istan", "or", "ea"]

# (first names, surnames, cities, countries, film words, rivers) per split
POOL_SIZES = {
    "train": (1600, 2400, 1600, 240, 1600, 400),
    "val": (150, 250, 150, 30, 150, 40),
    "test": (300, 400, 300, 40, 300, 60),
}


def _syllable(r):
    return r.choice(ONSETS) + r.choice(VOWELS) + r.choice(CODAS)


def _word(r, nsyl):
    w = "".join(_syllable(r) for _ in range(nsyl))
    return w


def _make_names(r, n, lo, hi, suffixes=None, minlen=3, maxlen=11, seen=None, avoid=()):
    """n new capitalised names of lo..hi syllables (plus an optional suffix), unique
    within `seen` (updated) and never in `avoid`."""
    seen = set() if seen is None else seen
    out = []
    while len(out) < n:
        w = _word(r, r.randint(lo, hi))
        if suffixes:
            s = r.choice(suffixes)
            if s and w[-1] in "aeiouy" and s[0] in "aeiouy":
                w = w[:-1]
            w = w + s
        if not (minlen <= len(w) <= maxlen) or w[0] not in "bcdfghjklmnprstvwzaeiou":
            continue
        w = w.capitalize()
        if w in seen or w in avoid:
            continue
        seen.add(w)
        out.append(w)
    return out


# name shape per kind: syllables lo..hi, suffixes, length bounds
NAME_KINDS = {
    "first": dict(lo=2, hi=2, maxlen=8),
    "last": dict(lo=2, hi=3, minlen=4, maxlen=10),
    "city": dict(lo=1, hi=2, suffixes=CITY_SUFFIXES, minlen=4, maxlen=10),
    "country": dict(lo=1, hi=2, suffixes=COUNTRY_SUFFIXES, minlen=4, maxlen=10),
    "film": dict(lo=2, hi=3, minlen=4, maxlen=10),
    "river": dict(lo=2, hi=2, maxlen=8),
}


def _build_pools():
    r = random.Random(SEED)
    seen = set()
    pools = {}
    # one pass per kind over all splits so every name is globally unique
    for k_i, kind in enumerate(NAME_KINDS):
        total = sum(POOL_SIZES[s][k_i] for s in SPLITS)
        names = _make_names(r, total, seen=seen, **NAME_KINDS[kind])
        r.shuffle(names)
        pos = 0
        for s in SPLITS:
            n = POOL_SIZES[s][k_i]
            pools.setdefault(s, {})[kind] = names[pos:pos + n]
            pos += n
    return pools


POOLS = _build_pools()

# Training worlds draw their names fresh for every example (fresh_pools), so the model
# never sees a name often enough to memorise it: a fixed pool of 240 countries ends up as
# 240 single tokens of the tokenizer, and a model trained on them answers test questions
# with a memorised train country instead of copying the unseen one from the documents.
# The train pools above only feed the tokenizer corpus (train_sample.jsonl).
FRESH_POOL_SIZES = {"first": 24, "last": 24, "city": 10, "country": 6, "film": 12, "river": 8}
_HELD_OUT = {k: set(POOLS["val"][k]) | set(POOLS["test"][k]) for k in NAME_KINDS}


def fresh_pools(r):
    """Name pools for one training world: new syllable names, never a val/test name."""
    seen = set()
    return {k: _make_names(r, n, seen=seen, avoid=_HELD_OUT[k], **NAME_KINDS[k])
            for k, n in FRESH_POOL_SIZES.items()}


# ---------------------------------------------------------------- world ----------

def fmt_date(d):
    y, m, day = d
    return f"{day} {MONTHS[m - 1]} {y}"


class World:
    """A small random world for one question."""

    def __init__(self, r, split, pools=None):
        self.r = r
        self.P = pools or POOLS[split]
        self.persons = {}   # name -> dict
        self.films = {}     # title -> dict
        self.cities = {}    # name -> dict
        c = r.sample(self.P["country"], r.randint(3, 5))
        self.countries = c
        for city in r.sample(self.P["city"], r.randint(5, 9)):
            self.cities[city] = {"name": city, "country": r.choice(c),
                                 "river": r.choice(self.P["river"]),
                                 "pop": r.choice([2, 3, 5, 8, 12, 20, 45, 60, 90, 150, 300]) * 1000}

    # -- people
    def new_name(self, first=None, last=None):
        for _ in range(100):
            n = f"{first or self.r.choice(self.P['first'])} {last or self.r.choice(self.P['last'])}"
            if n not in self.persons:
                return n
        raise RuntimeError("name space exhausted")

    def add_person(self, occupation=None, name=None, year_range=(1900, 1985)):
        r = self.r
        name = name or self.new_name()
        city = r.choice(list(self.cities))
        y = r.randint(*year_range)
        p = {"name": name, "occ": occupation or r.choice(OCCUPATIONS),
             "she": r.random() < 0.5, "date": (y, r.randint(1, 12), r.randint(1, 28)),
             "city": city, "country": self.cities[city]["country"], "works": []}
        self.persons[name] = p
        return p

    def add_similar_person(self, p):
        first, last = p["name"].split(" ", 1)
        if self.r.random() < 0.5:
            name = self.new_name(first=first)
        else:
            name = self.new_name(last=last)
        return self.add_person(name=name)

    # -- films
    def new_title(self, proper=None):
        r = self.r
        for _ in range(100):
            w = proper or r.choice(self.P["film"])
            t = r.randrange(7)
            if t == 0:
                title = w
            elif t == 1:
                title = f"The {w} {r.choice(TITLE_NOUNS)}"
            elif t == 2:
                title = f"{r.choice(TITLE_PLURALS)} of {w}"
            elif t == 3:
                title = f"{w} {r.choice(TITLE_NOUNS)}"
            elif t == 4:
                title = f"Return to {w}"
            elif t == 5:
                title = f"The {r.choice(TITLE_NOUNS)} of {w}"
            else:
                title = f"{r.choice(['A', 'One', 'The Last'])} {r.choice(TITLE_NOUNS)} in {w}"
            if title not in self.films:
                return title
        raise RuntimeError("title space exhausted")

    def add_film(self, director=None, title=None):
        r = self.r
        if director is None:
            director = self.add_person(occupation="film director")
        director["occ"] = "film director"
        lo = director["date"][0] + 22
        year = r.randint(lo, min(lo + 45, 2023))
        title = title or self.new_title()
        actors = [self.new_name() for _ in range(2)]
        f = {"title": title, "year": year, "genre": r.choice(GENRES), "director": director["name"],
             "actors": actors}
        self.films[title] = f
        director["works"].append(title)
        return f

    # -- documents
    def person_doc(self, name):
        p = self.persons[name]
        r = self.r
        he = "She" if p["she"] else "He"
        occ = p["occ"]
        if occ == "actor" and p["she"]:
            occ = "actress"
        art = "an" if occ[0] in "aeiou" else "a"
        date, city, country = fmt_date(p["date"]), p["city"], p["country"]
        work = p["works"][0] if p["works"] else None
        t = r.randrange(4)
        if t == 0:
            s = f"{name} (born {date} in {city}, {country}) is {art} {occ}."
            if work:
                s += f" {he} is best known for the film {work}."
        elif t == 1:
            s = f"{name} is {art} {occ} from {country}. {he} was born on {date} in {city}."
            if work:
                s += f" {he} directed {work}."
        elif t == 2:
            s = f"{name} was born in {city}, {country}, on {date}. {he} worked as {art} {occ}"
            s += f" and made the film {work}." if work else "."
        else:
            s = f"{name} ({date}) is {art} {occ}. Born in {city}, {country}, {he.lower()} "
            s += f"later became famous for {work}." if work else "still lives there."
        return {"title": name, "text": s}

    def film_doc(self, title):
        f = self.films[title]
        r = self.r
        g, y, d = f["genre"], f["year"], f["director"]
        a1, a2 = f["actors"]
        ag = "an" if g[0] in "aeiou" else "a"
        t = r.randrange(4)
        if t == 0:
            s = f"{title} is a {y} {g} film directed by {d}. It stars {a1} and {a2}."
        elif t == 1:
            s = f"{title} is {ag} {g} film from {y}, directed by {d} and starring {a1}."
        elif t == 2:
            s = f"Directed by {d}, {title} is {ag} {g} film released in {y}. {a1} plays the lead."
        else:
            s = f"{title} is {ag} {g} film. It was directed by {d} and came out in {y}, with {a2}."
        return {"title": title, "text": s}

    def city_doc(self, name):
        c = self.cities[name]
        t = self.r.randrange(2)
        if t == 0:
            s = (f"{name} is a city in {c['country']}. It lies on the {c['river']} river and "
                 f"has about {c['pop']:,} inhabitants.")
        else:
            s = f"{name} is a town on the {c['river']} river in {c['country']}, with {c['pop']:,} people."
        return {"title": name, "text": s}

    def doc(self, key):
        kind, name = key
        return {"person": self.person_doc, "film": self.film_doc, "city": self.city_doc}[kind](name)


ONE_HOP = ["birthplace", "birthdate", "director", "film_year", "nationality"]
TWO_HOP = ["director_birthplace", "director_birthdate", "director_country", "compare_film",
           "compare_birth"]
TYPES = ONE_HOP + TWO_HOP
# Training-only scaffolds for the comparisons (never in val/test; drawn only when named in
# type_weights). A comparison needs two lookups, a comparison of two years and a copy of
# the right name, and its only training signal is which name comes out: after two
# training stages the model still answered comparisons at chance (46-47%). These teach the
# parts: order_years compares two years written in the question; the *_given forms write
# one or both years into the comparison question itself, so a question with one year
# given needs one lookup instead of two.
AUX_TYPES = ["order_years", "compare_film_given", "compare_birth_given"]


def _question(w, qtype):
    """Returns (question, answer, gold doc keys)."""
    r = w.r
    films = list(w.films.values())
    if qtype in ("birthplace", "birthdate", "nationality"):
        p = w.persons[r.choice([n for n in w.persons if w.persons[n]["occ"] != "film director"]
                               or list(w.persons))]
        n = p["name"]
        if qtype == "birthplace":
            q = r.choice([f"Where was {n} born?", f"What is the place of birth of {n}?"])
            a = p["city"]
        elif qtype == "birthdate":
            q = r.choice([f"When was {n} born?", f"What is the date of birth of {n}?"])
            a = fmt_date(p["date"])
        else:
            q = r.choice([f"Which country is {n} from?", f"What is the nationality of {n}?"])
            a = p["country"]
        return q, a, [("person", n)]
    if qtype in ("director", "film_year"):
        f = r.choice(films)
        t = f["title"]
        if qtype == "director":
            q = r.choice([f"Who directed the film {t}?", f"Who is the director of the film {t}?"])
            return q, f["director"], [("film", t)]
        q = r.choice([f"When did the film {t} come out?", f"In which year was the film {t} released?"])
        return q, str(f["year"]), [("film", t)]
    if qtype.startswith("director_"):
        f = r.choice(films)
        t = f["title"]
        d = w.persons[f["director"]]
        if qtype == "director_birthplace":
            q = r.choice([f"Where was the director of the film {t} born?",
                          f"What is the place of birth of the director of film {t}?"])
            a = d["city"]
        elif qtype == "director_birthdate":
            q = r.choice([f"When was the director of the film {t} born?",
                          f"What is the date of birth of the director of film {t}?"])
            a = fmt_date(d["date"])
        else:
            q = r.choice([f"In which country was the director of the film {t} born?",
                          f"What nationality is the director of film {t}?"])
            a = d["country"]
        return q, a, [("film", t), ("person", d["name"])]
    if qtype == "compare_film":
        for _ in range(50):
            f1, f2 = r.sample(films, 2)
            if f1["year"] != f2["year"]:
                break
        else:
            return None
        a = f1 if f1["year"] < f2["year"] else f2
        if r.random() < 0.5:
            q = f"Which film came out first, {f1['title']} or {f2['title']}?"
        else:
            q = f"Which film came out later, {f1['title']} or {f2['title']}?"
            a = f2 if a is f1 else f1
        return q, a["title"], [("film", f1["title"]), ("film", f2["title"])]
    if qtype == "compare_birth":
        ps = list(w.persons.values())
        for _ in range(50):
            p1, p2 = r.sample(ps, 2)
            if p1["date"][0] != p2["date"][0]:
                break
        else:
            return None
        a = p1 if p1["date"] < p2["date"] else p2
        if r.random() < 0.5:
            q = f"Who was born first, {p1['name']} or {p2['name']}?"
        else:
            q = f"Who was born later, {p1['name']} or {p2['name']}?"
            a = p2 if a is p1 else p1
        return q, a["name"], [("person", p1["name"]), ("person", p2["name"])]
    if qtype == "order_years":
        y1, y2 = r.sample(range(1900, 2024), 2)
        if r.random() < 0.5:
            return f"Which year is earlier, {y1} or {y2}?", str(min(y1, y2)), []
        return f"Which year is later, {y1} or {y2}?", str(max(y1, y2)), []
    if qtype == "compare_film_given":
        res = _question(w, "compare_film")
        if res is None:
            return None
        q, a, gold = res
        f1, f2 = (w.films[k[1]] for k in gold)
        t1, t2 = _given(r, f1["title"], f2["title"], f1["year"], f2["year"], "{}")
        word = "first" if "first" in q else "later"
        return f"Which film came out {word}, {t1} or {t2}?", a, gold
    if qtype == "compare_birth_given":
        res = _question(w, "compare_birth")
        if res is None:
            return None
        q, a, gold = res
        p1, p2 = (w.persons[k[1]] for k in gold)
        n1, n2 = _given(r, p1["name"], p2["name"], p1["date"][0], p2["date"][0], "born {}")
        word = "first" if "first" in q else "later"
        return f"Who was born {word}, {n1} or {n2}?", a, gold
    raise ValueError(qtype)


COMPARE_TYPES = ("compare_film", "compare_birth", "compare_film_given", "compare_birth_given")
_YEAR = re.compile(r"\b(1[89]\d\d|20\d\d)\b")


def year_first(q, documents):
    """The answer of a comparison question as "<deciding year>: <name>" (training option
    --answer-format year-first, stage 4): the model first writes the year of the film or
    person it picks (a lookup and a comparison of two years, which it learns), then the
    name that has that year (a lookup keyed by the year it just wrote). Other questions
    unchanged. q: a question dict {"type", "answers", ...}; the year is the first year in
    the document titled with the answer (a film's release year, a person's birth year)."""
    if q["type"] not in COMPARE_TYPES or ":" in q["answers"][0]:
        return q
    name = q["answers"][0]
    doc = next(d for d in documents if d["title"] == name)
    return dict(q, answers=[f"{_YEAR.search(doc['text']).group(1)}: {name}"])


_GIVEN = re.compile(r" \((?:born )?\d{4}\)$")
_DIRECTOR_OF = re.compile(r"director of (?:the )?film (.+?)(?: born)?\?$")
_DIRECTED_BY = re.compile(r"[Dd]irected by (.+?)(?:,| and |\.)")


def bridge_first(q, documents):
    """The answer of a two-hop question with its bridge written first (training option
    --answer-format bridge-first, stage 5), a short chain of thought that turns one
    two-hop lookup into steps the model already does well:
      director_*: "<director>: <answer>"  (two one-hop lookups, the second keyed by the
                  name just written);
      compare_*:  "<year of the first-named> vs <year of the second-named>: <name>"
                  (two one-hop lookups, then a comparison of two years written next to
                  each other and a choice between the two names by their place in the
                  question, which the *_given scaffolds showed the model does at 96-100%).
    Exact match reads containment of the gold answer, which the bridge does not contain:
    only the chosen name, never the other one, is written. Other questions unchanged.
    q: {"question", "answers", "type", ...}; documents: the example's documents."""
    text = {d["title"]: d["text"] for d in documents}
    answer = q["answers"][0]
    if q["type"] in COMPARE_TYPES:
        if " vs " in answer:
            return q
        names = [_GIVEN.sub("", n) for n in
                 q["question"][q["question"].index(", ") + 2:-1].split(" or ")]
        y = [_YEAR.search(text[n]).group(1) for n in names]
        return dict(q, answers=[f"{y[0]} vs {y[1]}: {answer}"])
    if q["type"].startswith("director_"):
        film = _DIRECTOR_OF.search(q["question"]).group(1)
        director = _DIRECTED_BY.search(text[film]).group(1)
        if answer.startswith(director + ": "):
            return q
        return dict(q, answers=[f"{director}: {answer}"])
    return q


ANSWER_FORMATS = {"plain": None, "year-first": year_first, "bridge-first": bridge_first}


def format_answers(ex, answer_format):
    """ex (a make_example dict, with its "questions" if packed) with its answers written in
    answer_format (a key of ANSWER_FORMATS)."""
    fmt = ANSWER_FORMATS[answer_format]
    if fmt is None:
        return ex
    ex = fmt(ex, ex["documents"])
    if "questions" in ex:
        ex["questions"] = [fmt(q, ex["documents"]) for q in ex["questions"]]
    return ex


def _pick_type(r, type_weights):
    if not type_weights:
        return r.choice(TYPES)
    pop = TYPES + [t for t in AUX_TYPES if type_weights.get(t, 0.0) > 0]
    return r.choices(pop, weights=[type_weights.get(t, 1.0 if t in TYPES else 0.0) for t in pop])[0]


def _hops(qtype):
    return 1 if qtype in ONE_HOP or qtype == "order_years" else 2


def _given(r, a_text, b_text, a_year, b_year, fmt):
    """The two names of a *_given question with one or both years written after them."""
    mode = r.random()
    a = f"{a_text} ({fmt.format(a_year)})" if mode < 0.75 else a_text
    b = f"{b_text} ({fmt.format(b_year)})" if mode < 0.5 or mode >= 0.75 else b_text
    return a, b


def make_example(split, idx, n_docs=None, qtype=None, fresh_names=False, n_questions=1,
                 type_weights=None, answer_format="plain"):
    """Example idx of a split: a pure function of (SEED, split, idx and the options).

    n_docs: documents in the prompt (default 10 for val/test, 1..12 for train);
    fewer when the gold documents alone need more.
    fresh_names: draw the world's names fresh (fresh_pools; training) instead of from
    the split's pool.
    n_questions > 1: also "questions", a list of up to n_questions questions (the first
    is the example's own) that the same documents answer, each {"question", "answers",
    "hops", "type"} (training packs them onto one encoding of the documents).
    type_weights: {type: weight} for drawing training question types (default uniform).
    answer_format: how answers are written (ANSWER_FORMATS; training)."""
    r = random.Random(f"{SEED}/{split}/{idx}")
    if qtype is None:
        qtype = TYPES[idx % len(TYPES)] if split != "train" else _pick_type(r, type_weights)
    if n_docs is None:
        n_docs = 10 if split != "train" else r.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 11, 12, 12])
    while True:
        w = World(r, split, fresh_pools(r) if fresh_names else None)
        # films with directors; some directors have two films; similar titles
        dirs = []
        for _ in range(r.randint(3, 5)):
            if dirs and r.random() < 0.2:
                w.add_film(director=r.choice(dirs))
            else:
                f = w.add_film()
                dirs.append(w.persons[f["director"]])
        if r.random() < 0.6:
            base = r.choice(list(w.films.values()))
            words = [x for x in base["title"].split() if x not in TITLE_NOUNS + TITLE_PLURALS
                     and x not in ("The", "of", "to", "Return", "A", "One", "Last", "in")]
            if words:
                w.add_film(title=w.new_title(proper=words[-1]))
        # other people, some with names close to directors
        for _ in range(r.randint(2, 4)):
            w.add_person()
        for p in list(w.persons.values()):
            if r.random() < 0.35:
                w.add_similar_person(p)
        res = _question(w, qtype)
        if res is not None:
            break
    question, answer, gold = res
    # distractors: similar entities first (same first/last name, films sharing a word,
    # the other directors), then anything from the world
    keys = [("person", n) for n in w.persons] + [("film", t) for t in w.films] + \
        [("city", c) for c in w.cities]
    gold_set = set(gold)
    words = set(" ".join(k[1] for k in gold).split())

    def score(k):
        s = len(words & set(k[1].split())) * 2 + (1 if gold and k[0] == gold[0][0] else 0)
        return s + r.random() * 1.5

    cand = sorted((k for k in keys if k not in gold_set), key=score, reverse=True)
    n_docs = max(n_docs, len(gold))
    chosen = list(gold) + cand[: n_docs - len(gold)]
    r.shuffle(chosen)
    docs = [w.doc(k) for k in chosen]
    hops = _hops(qtype)
    ex = {"id": f"{split}-{idx:06d}", "question": question, "documents": docs,
          "answers": [answer], "hops": hops, "type": qtype}
    if n_questions > 1:
        ex["questions"] = _more_questions(w, set(chosen), question, answer, qtype, n_questions,
                                          type_weights)
    return format_answers(ex, answer_format)


def _more_questions(w, chosen, question, answer, qtype, n, type_weights=None):
    """Up to n questions (the given one first) whose gold documents are all in `chosen`."""
    out = [{"question": question, "answers": [answer], "type": qtype, "hops": _hops(qtype)}]
    seen = {question}
    for _ in range(6 * n):
        if len(out) >= n:
            break
        t = _pick_type(w.r, type_weights)
        res = _question(w, t)
        if res is None or res[0] in seen or not set(res[2]) <= chosen:
            continue
        seen.add(res[0])
        out.append({"question": res[0], "answers": [res[1]], "type": t, "hops": _hops(t)})
    return out


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--n-val", type=int, default=500)
    ap.add_argument("--n-test", type=int, default=1000)
    ap.add_argument("--n-train-sample", type=int, default=20000)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    write_jsonl(os.path.join(a.out, "val.jsonl"), (make_example("val", i) for i in range(a.n_val)))
    write_jsonl(os.path.join(a.out, "test.jsonl"), (make_example("test", i) for i in range(a.n_test)))
    write_jsonl(os.path.join(a.out, "train_sample.jsonl"),
                (make_example("train", i) for i in range(a.n_train_sample)))
    print(f"wrote {a.n_val} val, {a.n_test} test, {a.n_train_sample} train-sample examples to {a.out}")


if __name__ == "__main__":
    main()
