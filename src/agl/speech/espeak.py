"""Synthetic speech for smoke tests of the language identifier: espeak-ng reading one short
everyday paragraph in 20 languages (the same content in each, but French).

Robotic formant speech is not field-recording speech: a language the identifier misses here
may still be recognised in a real voice, and one it gets right here says nothing about a
street recording. It checks the plumbing and gives a floor (tests, benchmarks/speech_langid.py).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from agl.errors import AglError

# Whisper language code -> (espeak-ng voice, text).
PHRASES: dict[str, tuple[str, str]] = {
    "de": ("de", "Guten Morgen. Heute ist das Wetter in Berlin sehr schön, und wir gehen am Nachmittag mit den "
                 "Kindern in den Park spazieren. Danach trinken wir zusammen einen Kaffee am Marktplatz."),
    "es": ("es", "Buenos días. Hoy hace muy buen tiempo en Madrid, y por la tarde vamos a pasear con los niños por "
                 "el parque. Después tomaremos un café en la plaza del mercado."),
    # A train announcement: Whisper base hears espeak's French weakly, and which sentence it hears
    # depends on the words (the park paragraph the other languages read comes out as Thai 0.23;
    # see docs/speech.md).
    "fr": ("fr", "Mesdames et messieurs, bienvenue à bord. Le train à destination de Lyon partira dans cinq "
                 "minutes, voie numéro trois. Merci de votre attention."),
    "it": ("it", "Buongiorno a tutti. Oggi a Roma fa molto bel tempo, e nel pomeriggio andiamo a passeggiare nel "
                 "parco con i bambini. Poi prendiamo un caffè nella piazza del mercato."),
    "pt": ("pt", "Bom dia a todos. Hoje o tempo está muito bonito em Lisboa, e à tarde vamos passear no parque com "
                 "as crianças. Depois vamos tomar um café na praça do mercado."),
    "nl": ("nl", "Goedemorgen allemaal. Vandaag is het heel mooi weer in Amsterdam, en vanmiddag gaan we met de "
                 "kinderen wandelen in het park. Daarna drinken we samen koffie op de markt."),
    "pl": ("pl", "Dzień dobry wszystkim. Dzisiaj w Warszawie jest bardzo ładna pogoda, a po południu idziemy z "
                 "dziećmi na spacer do parku. Potem wypijemy razem kawę na rynku."),
    "ru": ("ru", "Доброе утро всем. Сегодня в Москве очень хорошая погода, и после обеда мы пойдём гулять с "
                 "детьми в парк. Потом мы вместе выпьем кофе на рыночной площади."),
    "tr": ("tr", "Herkese günaydın. Bugün İstanbul'da hava çok güzel, öğleden sonra çocuklarla parkta yürüyüşe "
                 "çıkacağız. Sonra pazar meydanında birlikte kahve içeceğiz."),
    "ja": ("ja", "皆さん、おはようございます。今日は東京はとても良い天気なので、午後は子供たちと公園を散歩します。"
                 "そのあと、市場の広場で一緒にコーヒーを飲みます。"),
    "zh": ("cmn", "大家早上好。今天北京的天气非常好，下午我们要和孩子们一起去公园散步。"
                  "然后我们会在市场广场一起喝咖啡。"),
    "ar": ("ar", "صباح الخير جميعا. الطقس اليوم جميل جدا في القاهرة، وبعد الظهر سنذهب مع الأطفال للتنزه في "
                 "الحديقة. ثم سنشرب القهوة معا في ساحة السوق."),
    "sv": ("sv", "God morgon allihop. Idag är vädret mycket fint i Stockholm, och på eftermiddagen ska vi promenera "
                 "i parken med barnen. Sedan dricker vi kaffe tillsammans på torget."),
    "fi": ("fi", "Hyvää huomenta kaikille. Tänään Helsingissä on todella kaunis sää, ja iltapäivällä menemme lasten "
                 "kanssa kävelylle puistoon. Sen jälkeen juomme yhdessä kahvia torilla."),
    "el": ("el", "Καλημέρα σε όλους. Σήμερα ο καιρός στην Αθήνα είναι πολύ ωραίος, και το απόγευμα θα πάμε βόλτα "
                 "στο πάρκο με τα παιδιά. Μετά θα πιούμε μαζί καφέ στην πλατεία της αγοράς."),
    "hi": ("hi", "सभी को सुप्रभात। आज दिल्ली में मौसम बहुत अच्छा है, और दोपहर में हम बच्चों के साथ पार्क में टहलने "
                 "जाएंगे। उसके बाद हम बाज़ार के चौक पर साथ में कॉफ़ी पिएंगे।"),
    "ko": ("ko", "여러분, 좋은 아침입니다. 오늘 서울은 날씨가 아주 좋아서 오후에는 아이들과 함께 공원에 산책하러 "
                 "갑니다. 그 다음에 시장 광장에서 같이 커피를 마실 거예요."),
    "cs": ("cs", "Dobré ráno všem. Dnes je v Praze velmi hezké počasí a odpoledne půjdeme s dětmi na procházku do "
                 "parku. Potom si spolu dáme kávu na náměstí."),
    "hu": ("hu", "Jó reggelt mindenkinek. Ma Budapesten nagyon szép az idő, és délután a gyerekekkel sétálni megyünk "
                 "a parkba. Utána együtt kávézunk a piactéren."),
    "en": ("en-us", "Good morning everyone. The weather in London is lovely today, and this afternoon we are going "
                    "for a walk in the park with the children. Afterwards we will have a coffee together in the "
                    "market square."),
}  # fmt: skip


def speak(language: str, out: Path, text: str | None = None) -> Path:
    """`out` (a WAV file): espeak-ng reading the phrase of a Whisper language code (or `text`
    in that language's voice)."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise AglError("espeak-ng is not installed (apt-get install espeak-ng)")
    if language not in PHRASES:
        raise AglError(f"no espeak phrase for '{language}'; known: {', '.join(sorted(PHRASES))}")
    voice, phrase = PHRASES[language]
    text = text or phrase
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([exe, "-v", voice, "-w", str(out), text], check=True, capture_output=True)
    return out
