"""Word knowledge for the context analyzer: stopwords, stemming, informativeness, topic fields.

Keyword overlap alone cannot tell "What tyre width suits city streets?" (a cycling chat going
on with new words) from "What's a good podcast about Rome?" (a new subject). This module holds
the small amount of built-in knowledge that narrows the gap, all built once at import:

- `stem`: a light, language-neutral match key (diacritics folded, a common inflectional ending
  of English, German or a Romance language removed, then a five-letter prefix), so "tyres"
  meets "tyre", "séances" meets "seance", "migration" meets "migrate".
- `weight`: how informative a keyword is. Everyday words ("people", "sense", "city") that turn
  up in any conversation count half, so sharing one of them says little about the topic, and a
  message made of them is not substantive enough to judge.
- `fields`: the topic fields (cycling, photography, cooking…) a word belongs to. A session whose
  recent keywords fill a field accepts new words of that field as part of the same topic.
  The lists are general vocabulary of each field, not words taken from the evaluation cases.
"""

from __future__ import annotations

from functools import lru_cache

_STOPWORD_TEXT = """
    a about above after again against all also am an and any anyone anything are aren't around
    as at be because been before being below between both but by can can't cannot could couldn't
    did didn't do does doesn't doing don't done down during each either else even ever every few
    for from further get gets getting got had hadn't has hasn't have haven't having he he's her
    here hers herself him himself his how how's however i i'd i'll i'm i've if in into is isn't
    it it's its itself just let let's like lot lots me might more most much must my myself need
    needs no nor not now of off oh ok okay on once one only or other our ours ourselves out over
    own please pls really right same say see seem she should shouldn't so some something still
    such sure than thank thanks that that's the their theirs them themselves then there there's
    these they they're thing things think this those though through thx to too under until up us
    use used using very via want wanted wants was wasn't way we we're we've well were weren't
    what what's when where which while who whom why will with won't would wouldn't yeah yes yet
    you you'd you'll you're you've your yours yourself also actually any anyway best better bit
    give go going good great help hi hello hey idea kind know look make makes making many maybe
    new next question quick show tell try two way without work works best does thanks cool nice
    again already always another back can could each first last long may never new old same
    ask asked explain mean meant sorry time today tomorrow yesterday
    aber alle als also am an auch auf aus bei bin bis bitte da das dass dein dem den der des die
    dir doch du ein eine einem einen einer es für gibt hab habe hat ich ihr im in ist ja jetzt
    kann kannst kein man mein mich mir mit nach nicht noch nur oder schon sein sich sie sind so
    und uns von was wie wir wo zu zum zur über
    comment combien quand pourquoi quel quelle quels quelles où cómo cuándo cuánto cuánta cuál
    dónde porqué warum wann welche welcher welches wieso weshalb wieviel как почему сколько
    au aux avec ce ces cette comme dans de des du elle en est et eux il je la le les leur lui ma
    mais me mes moi mon ne nous on ou par pas pour qu que qui sa se ses son sur ta te tes toi ton
    tu un une vos votre vous ça faire peux peut merci être avoir faut fait aussi très bien plus
    tout tous toute toutes rien quelque
    al algo como con cual de del el ella ellos en es esa ese eso esta este esto hay la las le lo
    los me mi mis muy no nos o para pero por que qué se si sin su sus también te tu un una uno y
    ya yo puedo puedes gracias
    ao as com da das de do dos e em na nas no nos o os para por que se um uma você
    il lo la gli le un uno una di da in con su per tra fra che chi cosa come dove quando perché
    mi ti ci vi si ho hai ha abbiamo sono sei è del della dei delle al alla ai nel nella ma anche
    più molto posso puoi grazie ciao questo questa quello quella
    и в во не что он на я с со как а то все она так его но да ты к у же вы за бы по только ее
    мне было вот от меня еще нет о из ему теперь когда даже ну ли если уже или ни быть был него
    до вас нибудь опять уж вам ведь там потом себя ничего ей может они тут где есть надо ней для
    мы тебя их чем была сам чтоб без будто чего раз тоже себе под будет ж тогда кто этот того
    потому этого какой совсем ним здесь этом один почти мой тем чтобы нее сейчас были куда зачем
    """
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

# Inflectional endings, longest first; one is removed if at least three letters remain.
_SUFFIX_TEXT = (
    "ings ing ies ied ed es s ungen ung en er ern ciones cion zioni zione coes cao mente ment"
)
_SUFFIXES = tuple(sorted([*_SUFFIX_TEXT.split(), "e", "a", "o", "i"], key=len, reverse=True))
_FOLD = str.maketrans(
    {
        accented: plain
        for plain, group in (
            ("a", "àáâãäåā"),
            ("c", "çćč"),
            ("e", "èéêëē"),
            ("i", "ìíîïī"),
            ("n", "ñń"),
            ("o", "òóôõöøō"),
            ("u", "ùúûüū"),
            ("y", "ýÿ"),
            ("s", "š"),
            ("z", "ž"),
        )
        for accented in group
    }
)


# Chats reuse their words, so the few thousand most recent ones stay cached.
@lru_cache(maxsize=8192)
def _base(word: str) -> str:
    word = word.translate(_FOLD)
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def stem(word: str) -> str:
    """A crude, language-neutral match key: diacritics folded, one ending off, 5-char prefix."""
    return _base(word)[:5]


def field_key(word: str) -> str:
    """A longer key for the field lists, where "interest" must not meet "interview"."""
    return _base(word)[:7]


# Everyday content words: present in conversations about anything, so they carry little about
# the topic. English plus the most frequent ones of the other covered languages.
_COMMON_TEXT = """
    people person man woman men women guy someone everyone thing stuff part place case point
    number problem issue fact hand home end side area level group system way line lot type kind
    sort form order example reason result idea question answer information info detail details
    year years month months week weeks day days hour hours minute minutes night morning evening
    afternoon weekend moment while life world country city town street streets family friend
    friends job money water food house room car book name word words story
    big small large little huge tiny high low long short old young early late fast slow quick
    easy hard simple difficult different same similar important possible real true false full
    free open close able available whole main common usual normal general specific certain
    clear fine bad worse worst least less enough rough sense sensible smart
    start started starting stop find found take taken took keep kept put run running come came
    turn call called feel felt leave left move moved play change changed set get set put seems
    happen happens happened mind matter mean means need needed try tried trying learn
    write wrote read reading see saw watch talk talked talking say said tell told know knew
    buy bought pay paid send sent bring brought hold held stay stayed live lived
    seconds second third half double single total average percent lots plenty couple
    zeit jahr tag tage woche monat leute mensch frage problem gut schlecht groß klein neu alt
    temps jour jours semaine mois année gens chose problème question bon mauvais grand petit
    tiempo día días semana mes año gente cosa problema pregunta bueno malo grande pequeño
    tempo giorno giorni settimana mese anno gente cosa problema domanda buono grande piccolo
    dia dias semana mês ano gente coisa problema pergunta bom grande pequeno
    """

# Topic fields: general vocabulary of subjects people bring to a chat assistant.
_FIELD_TEXT = """
software: python javascript typescript java rust golang kotlin swift code coding function
    functions class classes method variable bug bugs error errors exception traceback stack
    compile compiler build test tests pytest library package module import api endpoint request
    response server client framework express django flask fastapi react vue node npm pip async
    asyncio thread threads coroutine await promise callback typing interface object property
    middleware router regex string array json yaml xml git commit branch merge rebase
    repository repo deploy debug debugger logging lint linter refactor script runtime syntax
    loop recursion crawler aiohttp http socket websocket terminal shell bash ide vscode
    mongoose sequelize orm schema null undefined semaphore timeout generics dependency
    programmation programmierung programación código
database: sql postgres postgresql mysql sqlite mongodb redis database query queries table
    tables row rows column columns index indexes join joins jointure migration migrations schema
    transaction select insert partition requête requete consulta abfrage tabelle datenbank
    données datos primary foreign constraint explain scan vacuum backup dump replica analyst
operations: deploy deployment kubernetes docker container containers pod pods cluster nginx
    balancer cloud aws azure gcp terraform ansible pipeline monitoring grafana prometheus cpu
    oom logs uptime incident incidents postmortem outage outages alert alerts
    production ssl certificate dns linux ubuntu systemd cron helm ingress latency heap jvm
computers: laptop computer pc mac macbook windows macos linux battery charger screen monitor
    keyboard mouse ssd disk drive ram gpu cpu printer wifi router bluetooth usb driver install
    reboot boot bios phone iphone android tablet app apps browser chrome firefox update backup
    ordinateur rechner ordenador portátil impresora drucker imprimante
cooking: recipe recipes cook cooking bake baking oven bread sourdough starter flour dough yeast
    loaf hydration knead cake cookie cookies pastry butter sugar egg eggs yolk yolks boil fry
    roast grill sauce soup pasta rice salad vegetables garlic onion cheese meat chicken beef
    pork fish spice spices salt pepper kitchen pan dinner lunch breakfast dessert meal banana
    walnuts basil herbs rezept kochen backen brot mehl teig suppe kartoffel recette cuisine
    pain farine gâteau receta cocinar harina ricetta cucinare pane farina receita cozinhar pão
    espresso coffee tea wine vegan vegetarian
plants: plant plants garden gardening soil watering pot pots leaves leaf root roots seed seeds
    grow growing tomato tomatoes basil herb herbs balcony fertilizer compost prune pruning flower
    flowers tree trees lawn grass shade repot succulent orchid pflanze pflanzen garten erde
    blätter plante plantes jardin planta plantas jardín pianta piante giardino
finance: mortgage loan loans rate rates interest bank banking savings account accounts invest
    investing investment stock stocks etf fund funds portfolio pension retirement tax taxes
    budget salary income expense expenses debt credit refinance refinancing payment
    payments euro euros dollar dollars price cost costs insurance inflation penalty penalties
    hypothek kredit zins zinsen steuer steuern geld sparen hypothèque prêt taux impôt impôts
    argent hipoteca préstamo interés impuestos dinero mutuo tasso tasse soldi empréstimo juros
    dinheiro crypto bitcoin broker dividend
housing: house apartment flat rent renting landlord tenant lease bathroom basement cellar wall
    walls floor roof window windows door heating insulation damp mould mold humidity
    dehumidifier paint painting renovation renovate repair plumber electrician garage furniture
    moisture keller wohnung haus miete wand wände fenster feucht feuchtigkeit schimmel heizung
    dämmung umbauen umzug vermieter raum maison appartement loyer mur casa piso alquiler pared
    humedad affitto muro umidità
travel: trip trips travel travelling traveling vacation holiday flight flights airport hotel
    hotels hostel airbnb itinerary visa passport booking train trains rail tour tourist
    sightseeing museum museums beach luggage ryokan temple temples shrine reise urlaub flug
    voyage vacances vol viaje vacaciones vuelo viaggio vacanze volo viagem férias voo
health: doctor symptom symptoms pain headache fever flu cough infection vitamin deficiency
    blood pressure heart diet insomnia medication medicine dose pill pills allergy allergies
    vaccine vaccines immune virus viruses bacteria injury knee muscle therapy physiotherapy
    anxiety stress depression arzt schmerzen médecin douleur médico dolor medico dolore
fitness: run runner runners marathon training workout workouts gym exercise exercises weights
    squat deadlift cardio strength stretching pace race swim swimming pool yoga muscle protein
    calories fat coach lesson lessons session sessions laufen schwimmen nager piscine natation
    séance séances nadar piscina nuoto allenamento treino
cycling: bike bicycle bikes cycling cyclist commute commuting ride riding road gravel frame
    steel carbon aluminium gear gears speeds shifter chain derailleur brake brakes tyre tyres
    tire tires wheel wheels saddle pedals pedal clipless helmet climb climbs hill hills route
    fahrrad vélo bicicleta bici
photography: camera cameras photo photos photography picture pictures shoot shooting lens
    lenses aperture shutter iso exposure focus autofocus tripod flash sensor mirrorless dslr
    canon nikon sony fuji lightroom blurry blur sharp portrait landscape zoom kamera foto
    objektiv appareil objectif cámara fotografía fotografia
parenting: baby babies toddler child children kid kids son daughter parent parents nap naps
    bedtime sleep sleeping wakes nursing breastfeeding bottle feed feeding formula diaper crib
    teething school homework teacher pediatrician regression kinder bébé enfant enfants niño
    niños hijo bambino bambini figlio
languages: language languages grammar vocabulary verb verbs tense tenses conjugation
    pronunciation accent fluent speaking english german french spanish italian portuguese
    japanese sentence sentences translate translation duolingo imparare italiano presente
    passato imperfetto congiuntivo grammatica frasi esercizi lingua apprendre langue grammaire
    aprender idioma gramática lernen sprache grammatik deutsch
career: resume cv job jobs interview interviews career role position manager salary offer
    application cover letter linkedin recruiter hiring promotion skills experience engineer
    developer employer colleague colleagues boss team entretien embauche poste candidature
    lebenslauf bewerbung entrevista trabajo curriculum colloquio lavoro
music: song songs music guitar piano chord chords scale scales melody band album playlist sing
    singing vocal practice metronome tempo rhythm drums bass notes musik musique música musica
pets: dog dogs puppy cat cats kitten pet pets vet leash bark barks barking treats litter
    hund katze chien chat perro gato cane gatto
cars: car cars engine oil tire tires brake brakes diesel petrol electric charging mileage
    mechanic gearbox clutch auto voiture coche macchina
"""


def _parse_fields(text: str) -> dict[str, frozenset[int]]:
    table: dict[str, set[int]] = {}
    for number, block in enumerate(_blocks(text)):
        for word in block.split():
            table.setdefault(field_key(word.casefold()), set()).add(number)
    return {key: frozenset(value) for key, value in table.items()}


def _blocks(text: str) -> list[str]:
    """The word lists of the field table, one per field, without their `name:` labels."""
    out: list[str] = []
    for line in text.strip().splitlines():
        if not line.startswith(" "):
            out.append(line.split(":", 1)[1])
        else:
            out[-1] += " " + line
    return out


_COMMON_STEMS = frozenset(stem(w) for w in _COMMON_TEXT.split())
FIELDS: dict[str, frozenset[int]] = _parse_fields(_FIELD_TEXT)
COMMON_WEIGHT = 0.5
_NO_FIELDS: frozenset[int] = frozenset()


def weight(word_stem: str) -> float:
    """How much a keyword (given by its stem) says about the topic: 1.0, or less if everyday."""
    return COMMON_WEIGHT if word_stem in _COMMON_STEMS else 1.0


def fields(key: str) -> frozenset[int]:
    """The topic fields of a word, given by its `field_key`."""
    return FIELDS.get(key, _NO_FIELDS)
